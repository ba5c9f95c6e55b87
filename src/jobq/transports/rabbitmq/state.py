"""What the parts of one RabbitMQ consumer share: whether it is closing or paused, its event
counts, its background tasks, and the deliveries that wait for the pool's next receive.

Each consumer has its own (``consumer.RabbitTransport`` makes them and hands them to its
parts: the supervisor, the forwarder, the settler and the runs alone); nothing here is global.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jobq.core.job import CancelRequested, Delivery

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class State:
    """Whether the consumer is closing or paused, and the counts it exports (``health``)."""

    closing: bool = False
    paused: bool = False  # the queue is paused: no basic.consume (quiesce)
    # Set when close() begins: copies held for an alarm end.
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    # Set at close and while paused: held early messages go back.
    let_go: asyncio.Event = field(default_factory=asyncio.Event)
    stale: int = 0  # settles dropped because their session had ended
    acks_not_written: int = 0  # of those, acks: the broker delivers the job again
    reconnects: int = 0  # sessions started again after a loss
    cancelled_unrun: int = 0  # received with a tombstone: settled unrun

    def close(self) -> None:
        """close() begins: nothing more is taken, held copies and held early messages end."""
        self.closing = True
        self.closed.set()
        self.let_go.set()

    def cancel_requested(self, delivery: Delivery, log: logging.Logger) -> None:
        """A delivery with a tombstone: to the pool with that fact, to be settled unrun."""
        self.cancelled_unrun += 1
        log.info("job %s cancelled (jobq jobs cancel): received with a tombstone, settled unrun",
                 delivery.job.id)
        delivery.fact = CancelRequested()


class Background:
    """The consumer's tasks running in the background; close() waits for them (iterate)."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` in the background."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """``spawn`` without handing the task back (for callbacks whose result is awaited)."""
        self.spawn(work)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Inbox:
    """Deliveries that arrived for the pool's next receive, and how many are out (handed to the
    pool and not yet settled)."""

    __slots__ = ("_waiter", "arrived", "out")

    def __init__(self) -> None:
        self.arrived: collections.deque[Delivery] = collections.deque()
        self.out = 0
        self._waiter: asyncio.Future[None] | None = None  # a receive waiting for a delivery

    def arrive(self, delivery: Delivery) -> None:
        """For the pool's next receive."""
        self.arrived.append(delivery)
        if self._waiter is not None:
            _resolve(self._waiter)

    def take(self, max_count: int) -> list[Delivery]:
        """Up to ``max_count`` of those that arrived, counted out."""
        arrived = self.arrived
        n = min(max_count, len(arrived))
        self.out += n
        return [arrived.popleft() for _ in range(n)]

    def drop(self) -> int:
        """Forget what arrived (its session is lost: the broker delivers it again); how many."""
        dropped = len(self.arrived)
        self.arrived.clear()
        self.wake()
        return dropped

    def wake(self) -> None:
        """End a receive's ``sleep`` now (something arrived, or a session ended)."""
        if self._waiter is not None:
            _resolve(self._waiter)

    async def sleep(self, deadline: float) -> None:
        """Until a delivery arrives or the session ends (see ``wake``), or ``deadline``.

        A bare future and a timer: the cheapest wait asyncio has, and receive runs per batch.
        """
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_at(deadline, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
