"""Job timeouts and shutdown interruption: one watchdog for the pool, the same outcomes as before."""

from __future__ import annotations

import asyncio

from jobq.core.job import Job
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


def _pool(store: MemoryStore, handler: object, *, job_timeout: float | None = 0.1,
          shutdown_timeout: float = 5.0, once: bool = True) -> WorkerPool:
    return WorkerPool(MemoryTransport(store), handler,  # type: ignore[arg-type]
                      RetryPolicy(base_delay=60.0, jitter=False), concurrency=4, buffer_size=4,
                      job_timeout=job_timeout, shutdown_timeout=shutdown_timeout,
                      poll_timeout=0.01, once=once)


async def test_an_overrunning_job_is_failed_with_job_timeout_and_the_others_finish() -> None:
    store = MemoryStore()
    slow = store.add("slow", {})
    fast = [store.add("fast", {}) for _ in range(20)]

    async def handle(job: Job) -> None:
        await asyncio.sleep(10 if job.kind == "slow" else 0.001)

    stats = await asyncio.wait_for(_pool(store, handle).run(), 5)
    assert stats.ok == 20 and stats.retried == 1
    assert store.entries[slow].status == "pending"
    assert store.entries[slow].last_error is not None
    assert store.entries[slow].last_error.startswith("JobTimeout")
    assert all(store.entries[i].status == "done" for i in fast)


async def test_a_handlers_own_timeout_error_is_not_reported_as_the_job_timeout() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})

    async def handle(job: Job) -> None:
        raise TimeoutError("upstream timed out")

    stats = await _pool(store, handle, job_timeout=None).run()
    assert stats.retried == 1
    assert store.entries[job_id].last_error == "TimeoutError: upstream timed out"


async def test_a_handler_that_swallows_the_cancellation_is_not_cancelled_again_later() -> None:
    store = MemoryStore()
    ids = [store.add("k", {}) for _ in range(3)]
    seen: list[str] = []

    async def handle(job: Job) -> None:
        if job.id == ids[0]:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append("swallowed")
        await asyncio.sleep(0.2 if job.id == ids[1] else 0)  # longer than a tick, below timeout

    stats = await asyncio.wait_for(_pool(store, handle, job_timeout=0.3).run(), 5)
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
