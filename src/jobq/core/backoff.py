"""One backoff for every wait after a failure: job retries, connects, reconnects, a full queue.

The formula is described once, in docs/architecture.md ("Backoff").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from jobq.core.within import within

# The ceiling stops doubling after this many steps: far past any cap a config can set, and
# 2.0 ** n overflows a float near n = 1024, which a loop retrying forever would reach.
MAX_DOUBLINGS = 64


@dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, capped: ``uniform(0, min(cap, base * 2**(n-1)))``."""

    base: float
    cap: float
    jitter: bool = True
    rand: Callable[[], float] = random.random

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        # Full jitter (a random point below the ceiling, not around it) spreads a burst of
        # failures instead of retrying them in lock-step.
        steps = min(max(0, attempt - 1), MAX_DOUBLINGS)
        ceiling = min(self.cap, self.base * 2.0 ** steps)
        return ceiling * self.rand() if self.jitter else ceiling

    def attempts(self, limit: int = 0, *, until: float | None = None) -> Attempts:
        """Numbered tries with this backoff between them: ``async for attempt in ...``.

        ``limit`` tries at most (0: no limit). With ``until`` (loop time) a pause is cut to end
        at it, and once it has passed no further try starts. The pause comes when the loop asks
        for the next try, so a body that returns, raises or breaks ends the tries at once.
        """
        return Attempts(self, limit, until)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try: its ``number`` (1-based), the ``limit`` (0: none) and the ``delay`` after it."""

    number: int
    limit: int
    delay: float

    @property
    def last(self) -> bool:
        """True when no try follows this one."""
        return bool(self.limit) and self.number >= self.limit

    def __str__(self) -> str:
        """``3/10``, or ``3`` without a limit (for log lines)."""
        return f"{self.number}/{self.limit}" if self.limit else str(self.number)


class Attempts:
    """The async iterator behind ``Backoff.attempts``."""

    def __init__(self, backoff: Backoff, limit: int, until: float | None) -> None:
        self._backoff = backoff
        self._limit = limit
        self._until = until
        self._current: Attempt | None = None
        self._final = False  # a pause was cut to end at ``until``: the try after it is the last

    def __aiter__(self) -> Attempts:
        """This iterator."""
        return self

    async def __anext__(self) -> Attempt:
        """Pause after the previous try (if any), then hand out the next one; none for a task
        that was asked to stop (``raise_if_cancelled``)."""
        previous = self._current
        if previous is not None:
            raise_if_cancelled()
            if previous.last or self._final:
                raise StopAsyncIteration
            delay = previous.delay
            if self._until is not None:
                left = self._until - asyncio.get_running_loop().time()
                if left <= 0:
                    raise StopAsyncIteration
                # The clock may read a hair before ``until`` after sleeping up to it; without
                # this flag that would buy a stray extra pause and try.
                self._final = delay >= left
                delay = min(delay, left)
            await asyncio.sleep(delay)
        number = 1 if previous is None else previous.number + 1
        self._current = Attempt(number, self._limit, self._backoff.delay(number))
        return self._current


def raise_if_cancelled() -> None:
    """CancelledError if the running task was cancelled and something swallowed it.

    A try cut by a cancel can end in its own error instead: ``asyncio.wait_for`` (under
    aio-pika's connect) returns the inner result when it is ready as the cancel arrives, and
    the cancel is lost. The request stays counted (``Task.cancelling``), so a retry loop asks
    here before its next try: a stop signal during a start-up retrying an unreachable server
    was otherwise ignored until every attempt was spent.
    """
    if cancelled():
        raise asyncio.CancelledError


def cancelled() -> bool:
    """Whether the running task has a cancel request pending (``raise_if_cancelled``)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def pause(delay: float, stop: asyncio.Event | None = None) -> None:
    """Sleep ``delay`` seconds, or less if ``stop`` is set meanwhile."""
    if stop is None:
        await asyncio.sleep(delay)
        return
    with contextlib.suppress(TimeoutError):
        await within(stop.wait(), delay)


# How an enqueue polls a queue at limits.max_pending for room: briskly, since a consumer frees
# room job by job, and both backends alike.
QUEUE_FULL_BACKOFF = Backoff(base=0.02, cap=0.5)
