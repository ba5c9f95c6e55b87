"""The pool's bounded buffer: how much it may hold, what it holds, who waits for room."""

from __future__ import annotations

import asyncio

from jobq.core.job import Delivery
from jobq.worker.sizing import BufferSizer

STOP = None  # the sentinel a worker reads as "no more work"


class Capacity:
    """Slot accounting over the workers' queue: ``outstanding`` deliveries received and not
    settled, at most ``size`` (``concurrency`` + the buffer) of them.

    ``room`` is set when a receive may be worth asking for again (a settle freed enough, a
    stop, a pause's change).
    ``isolated``: crash suspects received (``Delivery.isolate``), waiting for their turn: one
    at a time runs (``suspect``), beside the other work, so that a crash during its run names
    it and no other suspect (docs/architecture.md, "Crashes"); ``held_back``: taken by a
    worker after a pause or a stop, not started.
    """

    def __init__(self, concurrency: int, buffer_size: int, buffer_max: int) -> None:
        self.concurrency = concurrency
        # buffer_max above buffer_size: jobq sizes the buffer by the settle rate (sizing.py).
        self._sizer = BufferSizer(buffer_size, buffer_max)
        self.size = 0
        self.low_water = 1
        self._resize(buffer_size)
        self.queue: asyncio.Queue[Delivery | None] = asyncio.Queue()
        self.outstanding = 0
        self.room = asyncio.Event()
        self.isolated: list[Delivery] = []
        self.suspect: Delivery | None = None  # the one isolated delivery handed to the workers
        self.held_back: list[Delivery] = []

    @property
    def unbuffered(self) -> bool:
        """No buffer beside the workers (transaction mode: it claims only for free workers)."""
        return self.size == self.concurrency

    def measure(self, now: float, settled: int) -> None:
        """Let the sizer resize the buffer by the settle rate (unless its size is fixed)."""
        if not self._sizer.fixed:
            self._resize(self._sizer.measure(now, settled))

    def _resize(self, buffer_size: int) -> None:
        self.size = self.concurrency + buffer_size
        self.low_water = max(1, self.size // 4)

    async def room_for_a_batch(self) -> bool:
        """Claim in batches: True if a quarter of the capacity is free, or the workers are about
        to starve; else False once a settle (or a stop, a pause) has freed some."""
        room = self.size - self.outstanding
        if room <= 0 or (room < self.low_water and not self.queue.empty()):
            self.room.clear()
            await self.room.wait()
            return False
        return True

    def ask(self, room: int) -> int:
        """With a buffer, at most half the capacity per receive, so that the next can be on its
        way while the workers run this one (the fetcher's ``_ask_ahead``)."""
        if self.unbuffered:
            return room
        return min(room, max(1, self.size // 2))

    def accept(self, batch: list[Delivery]) -> None:
        """Take a received batch in: to the workers, isolated ones aside to run one at a time."""
        self.outstanding += len(batch)
        for delivery in batch:
            if delivery.isolate and delivery.malformed is None and delivery.fact is None:
                self.isolated.append(delivery)
            else:
                self.queue.put_nowait(delivery)
        self._next_suspect()

    def _next_suspect(self) -> None:
        if self.suspect is None and self.isolated:
            self.suspect = self.isolated.pop(0)
            self.queue.put_nowait(self.suspect)

    def freed(self, delivery: Delivery) -> None:
        """``delivery`` settled: its slot is free (and, a suspect, its turn over); wake who waits
        for a settle or for room."""
        if delivery is self.suspect:
            self.suspect = None
            self._next_suspect()
        self.outstanding -= 1
        if self.size - self.outstanding >= self.low_water or self.queue.empty():
            self.room.set()

    def unstarted(self) -> list[Delivery]:
        """Take every delivery received and not started out of the pool's hands."""
        unstarted = [d for d in (self.queue.get_nowait() for _ in range(self.queue.qsize()))
                     if d is not None]
        unstarted += self.isolated + self.held_back
        self.isolated.clear()
        self.held_back.clear()
        if any(d is self.suspect for d in unstarted):  # not started: its turn is over
            self.suspect = None
        return unstarted

    def let_held_back_run(self) -> None:
        """A pause over before the fetcher saw it: what workers held back runs after all."""
        for delivery in self.held_back:
            self.queue.put_nowait(delivery)
        self.held_back.clear()

    def wake(self) -> None:
        """Something changed (a stop, a pause's change): whoever waits looks again."""
        self.room.set()

    def stop_workers(self) -> None:
        """One stop sentinel per worker, behind what the queue holds."""
        for _ in range(self.concurrency):
            self.queue.put_nowait(STOP)
