"""The pool asks for its next batch before its workers run the one it just received.

Workers whose jobs never wait (no-op jobs, a lease-mode ack that only queues) run the whole
buffer without yielding the event loop. Before, the next receive went out only once they had
emptied it, so each claim's round trip followed the batch's work instead of overlapping it
(measured on PostgreSQL lease mode: the fetcher always woke with nothing outstanding).
"""

from __future__ import annotations

import asyncio

from jobq import Job
from jobq.core.job import RELEASE, Delivery
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy

JOBS = 96


class RoundTrips(MemoryTransport):
    """Each receive is a round trip (2 ms) made in a task of its own, as a lease claim is."""

    def __init__(self, store: MemoryStore, events: list[str]) -> None:
        super().__init__(store)
        self.events = events

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        return await asyncio.ensure_future(self._round_trip(max_count, timeout))

    async def _round_trip(self, max_count: int, timeout: float) -> list[Delivery]:
        self.events.append("sent")
        await asyncio.sleep(0.002)
        batch = await super().receive(max_count, timeout)
        self.events.append(f"got {len(batch)}")
        return batch


def drain(events: list[str], store: MemoryStore, *, concurrency: int, buffer_size: int) -> WorkerPool:
    async def handler(job: Job) -> None:  # never waits: the worker keeps the loop
        events.append("ran")

    return WorkerPool(RoundTrips(store, events), handler, RetryPolicy(jitter=False),
                      concurrency=concurrency, buffer_size=buffer_size, job_timeout=5.0,
                      shutdown_timeout=5.0, poll_timeout=0.05, once=True)


def filled(jobs: int) -> MemoryStore:
    store = MemoryStore()
    for i in range(jobs):
        store.add("k", {"i": i})
    return store


async def test_the_next_receive_goes_out_before_the_batch_runs() -> None:
    events: list[str] = []
    store = filled(JOBS)
    stats = await drain(events, store, concurrency=4, buffer_size=28).run()
    assert stats.ok == JOBS and all(e.status == "done" for e in store.entries.values())
    batches = [i for i, event in enumerate(events) if event.startswith("got ") and event != "got 0"]
    assert len(batches) >= 3, events
    # Every batch but the last: the next receive is on its way before any of its jobs runs,
    # so each round trip overlaps the work of the batch before it.
    assert [events[i + 1] for i in batches[:-1]] == ["sent"] * (len(batches) - 1), events
    assert "ran" not in events[:batches[0] + 1]


async def test_without_a_buffer_the_pool_asks_only_for_free_workers() -> None:
    events: list[str] = []
    store = filled(12)
    stats = await drain(events, store, concurrency=4, buffer_size=0).run()
    assert stats.ok == 12
    assert "got 4" in events and not any(e.startswith("got ") and int(e[4:]) > 4 for e in events)


def stuck_pool(transport: MemoryTransport, *, shutdown_timeout: float) -> WorkerPool:
    """Two workers whose jobs run until the shutdown interrupts them, a buffer of 30."""
    async def handler(job: Job) -> None:
        await asyncio.Event().wait()

    return WorkerPool(transport, handler, RetryPolicy(jitter=False), concurrency=2,
                      buffer_size=30, job_timeout=5.0, shutdown_timeout=shutdown_timeout,
                      poll_timeout=0.05)


class SlowSecondReceive(MemoryTransport):
    """The second receive takes 0.3 s and, like a claim that already went out, finishes even
    when cancelled, handing its batch to the caller."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.receives = 0
        self.ahead_in_flight = asyncio.Event()

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.receives += 1
        if self.receives != 2:
            return await super().receive(max_count, timeout)
        self.ahead_in_flight.set()
        claim = asyncio.ensure_future(self._slow(max_count, timeout))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            return await claim

    async def _slow(self, max_count: int, timeout: float) -> list[Delivery]:
        await asyncio.sleep(0.3)
        return await super().receive(max_count, timeout)


async def test_a_stop_while_the_next_receive_is_out_hands_its_batch_back() -> None:
    store = filled(40)
    transport = SlowSecondReceive(store)
    pool = stuck_pool(transport, shutdown_timeout=0.5)
    run = asyncio.create_task(pool.run())
    await transport.ahead_in_flight.wait()
    pool.stop()
    stats = await run
    states = [e.status for e in store.entries.values()]
    assert "running" not in states, states  # nothing left claimed: handed back
    # The stop came before the first batch reached the workers: none of it starts after the
    # stop (before, two did, and were interrupted by the shutdown), and all of it and the late
    # second batch go back.
    assert stats.retried == 0
    assert stats.released == 32


class CancelAsTheSecondReturns(MemoryTransport):
    """The second receive (the one started early) returns its batch with a cancel of the
    fetcher already queued: the cancel lands after the batch was taken and before the fetcher
    has it, where a stop's cancel may land in a busy drain."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.receives = 0

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.receives += 1
        await asyncio.sleep(0.001)  # the round trip: the fetcher is waiting for it meanwhile
        batch = await super().receive(max_count, timeout)
        if self.receives == 2:
            fetcher, = (t for t in asyncio.all_tasks() if t.get_coro().__name__ == "fetch")
            asyncio.get_running_loop().call_soon(fetcher.cancel)
        return batch


async def test_a_cancel_as_the_early_receive_returns_loses_nothing() -> None:
    store = filled(40)
    transport = CancelAsTheSecondReturns(store)
    pool = stuck_pool(transport, shutdown_timeout=0.2)
    stats = await pool.run()
    states = [e.status for e in store.entries.values()]
    assert "running" not in states, states.count("running")  # before: the second batch's 16
    assert states == ["pending"] * 40  # the two interrupted retried, the rest handed back
    assert stats.retried == 2 and transport.receives == 2


class ClaimThenCancelled(MemoryTransport):
    """The second receive behaves as a lease claim does: the claim is out (its rows taken) when
    a cancel comes, so it waits for the claim's answer and hands the rows back itself, and a
    second cancel during that wait leaves them taken by nobody. It also asks the pool to stop,
    while the fetcher is still handing over the first batch."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.receives = self.cancels = 0
        self.pool: WorkerPool | None = None

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.receives += 1
        if self.receives != 2:
            return await super().receive(max_count, timeout)
        assert self.pool is not None
        self.pool.stop()
        batch = await super().receive(max_count, timeout)
        try:
            await asyncio.sleep(0.05)  # the claim's round trip
        except asyncio.CancelledError:
            self.cancels += 1
            try:
                await asyncio.sleep(0.05)  # its answer, awaited before handing the rows back
            except asyncio.CancelledError:
                self.cancels += 1
                raise
            for delivery in batch:
                await super().settle(delivery, RELEASE)
            raise
        return batch


async def test_the_early_receive_is_cancelled_once_at_stop_and_hands_its_rows_back() -> None:
    store = filled(40)
    transport = ClaimThenCancelled(store)
    pool = transport.pool = stuck_pool(transport, shutdown_timeout=0.2)
    await pool.run()
    assert transport.receives == 2 and transport.cancels == 1  # before: cancelled twice
    assert [e.status for e in store.entries.values()] == ["pending"] * 40
