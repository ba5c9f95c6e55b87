"""At shutdown the unstarted are handed back all at once, and within a bound."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jobq import Job
from jobq.core.job import Decision, Delivery, Release
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until


class SlowRelease(MemoryTransport):
    """Each release takes ``delay`` seconds (a server that answers slowly, or not at all)."""

    def __init__(self, store: MemoryStore, delay: float) -> None:
        super().__init__(store)
        self.delay = delay
        self.concurrent = self.peak = 0

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        if not isinstance(decision, Release):
            await super().settle(delivery, decision)
            return
        self.concurrent += 1
        self.peak = max(self.peak, self.concurrent)
        try:
            await asyncio.sleep(self.delay)
            await super().settle(delivery, decision)
        finally:
            self.concurrent -= 1


async def run_and_stop(transport: MemoryTransport, **kw: Any) -> tuple[WorkerPool, float]:
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(0.2)

    pool = WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False),
                      concurrency=1, buffer_size=20, job_timeout=None, poll_timeout=0.05,
                      **{"shutdown_timeout": 5.0, **kw})
    run = asyncio.create_task(pool.run())
    await started.wait()
    # The buffer fills: every job but one running is received (the buffer takes 19 or 20,
    # in receives of at most half the capacity), or the first job is over.
    await until(lambda: len(transport.store.by_status("pending")) <= 1 or pool.stats.ok,
                "the buffer filled", 10)
    began = time.monotonic()
    pool.stop()
    await run
    return pool, time.monotonic() - began


async def test_unstarted_jobs_are_released_together() -> None:
    store = MemoryStore()
    for i in range(21):
        store.add("k", {"i": i})
    transport = SlowRelease(store, 0.1)
    pool, _ = await run_and_stop(transport)
    # The buffer of 20 fills in receives of at most half the capacity: 19 or 20 wait unstarted.
    # All at once: the stop takes one release's time, not 20 (no wall-clock bound here, which
    # a loaded machine could break).
    assert pool.stats.released >= 19 and transport.peak == pool.stats.released
    assert [e.status for e in store.entries.values()].count("pending") == 21 - pool.stats.ok


async def test_releases_that_hang_are_given_up_within_the_bound() -> None:
    store = MemoryStore()
    for i in range(21):
        store.add("k", {"i": i})
    transport = SlowRelease(store, 3600.0)
    pool, took = await run_and_stop(transport, shutdown_timeout=0.5)
    assert pool.stats.released == 0 and pool.in_flight == 0
    assert took < 2.0  # min(RELEASE_TIMEOUT, shutdown_timeout) plus the running job's end
