"""A buffer whose items go stale: each kept with the moment it came, handed to ``on_stale``
once older than ``keep_for``.

One owner takes from it, adds to it and stops it; a timer (at most one, armed while anything
is in it) looks again when the oldest would turn stale, so nothing outstays its time by more
than the timer's slack even when no one takes. Nothing in it is PostgreSQL's: transaction mode keeps
its jobs picked ahead here (txn_schedule.py).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
SLACK = 0.01  # the timer fires this much after the oldest turns stale (timers round to 1 ms)


class TimedBuffer(Generic[T]):
    """Items, oldest first, each handed to ``on_stale`` once older than ``keep_for`` seconds."""

    __slots__ = ("_items", "_keep_for", "_on_stale", "_stopped", "_timer")

    def __init__(self, keep_for: float, on_stale: Callable[[list[T]], None]) -> None:
        self._items: collections.deque[tuple[T, float]] = collections.deque()
        self._keep_for = keep_for
        self._on_stale = on_stale
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False  # no more looks: the owner hands back what is left itself

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, items: list[T]) -> None:
        """Keep ``items``, as of now; arm the timer if it is not."""
        now = asyncio.get_running_loop().time()
        self._items.extend((item, now) for item in items)
        if self._timer is None:
            self.expire()

    def pop(self) -> T:
        """The oldest item (IndexError if none): call ``expire`` first to skip the stale."""
        return self._items.popleft()[0]

    def clear(self) -> list[T]:
        """Every item, taken out."""
        items = [item for item, _ in self._items]
        self._items.clear()
        return items

    def stop(self) -> None:
        """No more looks for stale items: the timer disarmed, ``expire`` does nothing."""
        self._stopped = True
        self._disarm()

    def expire(self) -> None:
        """Hand the stale items to ``on_stale``; make sure of a look when the oldest left turns
        stale. A timer already armed is kept (the owner calls this for every take): it was
        armed for an item at least as old as the oldest now, so it fires no later than needed,
        and then looks again."""
        if self._stopped:
            return
        loop = asyncio.get_running_loop()
        now, stale, items = loop.time(), [], self._items
        while items and now - items[0][1] > self._keep_for:
            stale.append(items.popleft()[0])
        if stale:
            self._on_stale(stale)
        if items and self._timer is None:
            self._timer = loop.call_later(items[0][1] + self._keep_for - now + SLACK, self._look)

    def _look(self) -> None:
        self._timer = None
        self.expire()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
