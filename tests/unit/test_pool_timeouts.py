"""Job timeouts and shutdown interruption: one watchdog for the pool, the same outcomes as before."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from jobq.core.job import Job
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker import interrupts, workers
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until


class Clock:
    """The monotonic time of the pool's workers (when a handler started) and of its watchdog
    (how long it has run), moved only by the test: a job overruns its timeout when the test
    says so, never because a loaded machine held the loop up. Counts the watchdog's looks."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.looks = 0

    def look(self) -> float:
        self.looks += 1
        return self.now

    async def looked(self, times: int) -> None:
        """Until the watchdog has looked ``times`` more times."""
        since = self.looks
        await until(lambda: self.looks >= since + times, f"{times} looks of the watchdog")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(workers, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(interrupts, "time", SimpleNamespace(monotonic=clock.look))
    return clock


def _pool(store: MemoryStore, handler: object, *, job_timeout: float | None = 0.1,
          shutdown_timeout: float = 5.0, once: bool = True) -> WorkerPool:
    return WorkerPool(MemoryTransport(store), handler,  # type: ignore[arg-type]
                      RetryPolicy(base_delay=60.0, jitter=False), concurrency=4, buffer_size=4,
                      job_timeout=job_timeout, shutdown_timeout=shutdown_timeout,
                      poll_timeout=0.01, once=once)


async def test_an_overrunning_job_is_failed_with_job_timeout_and_the_others_finish(
        clock: Clock) -> None:
    store = MemoryStore()
    slow = store.add("slow", {})
    fast = [store.add("fast", {}) for _ in range(20)]

    async def handle(job: Job) -> None:
        await asyncio.sleep(10 if job.kind == "slow" else 0.001)

    pool = _pool(store, handle)
    run = asyncio.create_task(pool.run())
    await until(lambda: pool.stats.ok == 20, "the fast ones to finish")
    clock.now += 0.2  # the slow one is past its timeout (0.1 s)
    stats = await asyncio.wait_for(run, 5)
    assert stats.ok == 20 and stats.retried == 1
    assert store.entries[slow].status == "pending"
    assert (store.entries[slow].last_error or "").startswith("JobTimeout")
    assert all(store.entries[i].status == "done" for i in fast)


async def test_a_handlers_own_timeout_error_is_not_reported_as_the_job_timeout() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})

    async def handle(job: Job) -> None:
        raise TimeoutError("upstream timed out")

    stats = await _pool(store, handle, job_timeout=None).run()
    assert stats.retried == 1
    assert store.entries[job_id].last_error == "TimeoutError: upstream timed out"


async def test_a_handler_that_swallows_the_cancellation_is_not_cancelled_again_later(
        clock: Clock) -> None:
    store = MemoryStore()
    ids = [store.add("k", {}) for _ in range(3)]
    started: list[str] = []
    ended: list[str] = []
    seen: list[str] = []
    below = asyncio.Event()

    async def handle(job: Job) -> None:
        started.append(job.id)
        if job.id == ids[0]:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append("swallowed")
            await clock.looked(3)  # it runs on past its timeout; the watchdog lets it be
        elif job.id == ids[1]:
            await below.wait()  # it runs across the watchdog's looks, below its timeout
        ended.append(job.id)

    run = asyncio.create_task(_pool(store, handle, job_timeout=0.3).run())
    await until(lambda: len(started) == 3, "the three to start")
    clock.now += 0.2  # below the timeout (0.3 s): no one is cut
    await clock.looked(3)
    assert seen == [] and ended == [ids[2]]
    below.set()
    await until(lambda: ids[1] in ended, "the one below its timeout to end")
    clock.now += 0.2  # the first is past its timeout: cut once, and it swallows the cancel
    stats = await asyncio.wait_for(run, 5)
    assert seen == ["swallowed"]
    assert stats.ok == 3 and stats.retried == 0


async def test_the_shutdown_deadline_interrupts_running_jobs_as_retryable() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})
    started = asyncio.Event()

    async def handle(job: Job) -> None:
        started.set()
        await asyncio.sleep(30)

    pool = _pool(store, handle, job_timeout=None, shutdown_timeout=0.1, once=False)
    run = asyncio.create_task(pool.run())
    await asyncio.wait_for(started.wait(), 5)
    pool.stop()
    stats = await asyncio.wait_for(run, 5)
    assert stats.retried == 1
    assert (store.entries[job_id].last_error or "").startswith("ShutdownInterrupted")
