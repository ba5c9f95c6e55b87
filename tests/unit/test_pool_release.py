"""At shutdown the unstarted are handed back all at once, and within a bound."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

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


async def run_and_stop(transport: MemoryTransport, **kw: Any) -> WorkerPool:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        # The first job runs until the stop, however slow the machine: one that ended first
        # would let a buffered one start, and fewer than 19 would wait unstarted.
        await stopped.wait()

    pool = WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False),
                      concurrency=1, buffer_size=20, job_timeout=None, poll_timeout=0.05,
                      **{"shutdown_timeout": 5.0, **kw})
    run = asyncio.create_task(pool.run())
    await started.wait()
    # The buffer fills: every job but the one running is received (the buffer takes 19 or
    # 20, in receives of at most half the capacity).
    await until(lambda: len(transport.store.by_status("pending")) <= 1, "the buffer filled", 10)
    pool.stop()
    stopped.set()
    # A deadline well below RELEASE_TIMEOUT (10 s): a stop that waited it out, or waited for
    # ever on the releases that hang, fails here.
    await asyncio.wait_for(run, 5)
    return pool


async def test_unstarted_jobs_are_released_together() -> None:
    store = MemoryStore()
    for i in range(21):
        store.add("k", {"i": i})
    transport = SlowRelease(store, 0.1)
    pool = await run_and_stop(transport)
    # The buffer of 20 fills in receives of at most half the capacity: 19 or 20 wait unstarted.
    # All at once: the stop takes one release's time, not 20 (no wall-clock bound here, which
    # a loaded machine could break).
    assert pool.stats.released >= 19 and transport.peak == pool.stats.released
    assert [e.status for e in store.entries.values()].count("pending") == 21 - pool.stats.ok


async def test_releases_that_hang_are_given_up_within_the_bound(
        caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    for i in range(21):
        store.add("k", {"i": i})
    transport = SlowRelease(store, 3600.0)
    with caplog.at_level(logging.WARNING, logger="jobq.pool"):
        pool = await run_and_stop(transport, shutdown_timeout=0.5)
    assert pool.stats.released == 0 and pool.in_flight == 0
    # Given up after min(RELEASE_TIMEOUT, shutdown_timeout), as the warning says: the bound
    # read from the pool's own words, not from a wall-clock time a loaded machine stretches.
    assert "could not release" in caplog.text and "no answer within 0.5s" in caplog.text
