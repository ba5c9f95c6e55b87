"""WorkerPool semantics over the in-memory transport: no server needed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from jobq import Job, PermanentError, Retry
from jobq.core.job import Delivery
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.processor import Handler, as_async
from jobq.worker.retry import RetryPolicy
from tests.conftest import until


class CountingTransport(MemoryTransport):
    """Records the largest batch asked for and the largest number held at once."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.asked: list[int] = []

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.asked.append(max_count)
        return await super().receive(max_count, timeout)


def make_pool(transport: MemoryTransport, handler: Handler, **kw: Any) -> WorkerPool:
    opts: dict[str, Any] = {"concurrency": 4, "buffer_size": 4, "job_timeout": 5.0,
                            "shutdown_timeout": 5.0, "poll_timeout": 0.05, "once": True}
    opts.update(kw)
    policy = RetryPolicy(base_delay=0.0, max_delay=3600.0, jitter=False)
    return WorkerPool(transport, handler, policy, **opts)


async def test_every_job_runs_once_and_concurrency_is_bounded() -> None:
    store = MemoryStore()
    for i in range(200):
        store.add("k", {"i": i})
    transport = CountingTransport(store)
    running = peak = 0

    async def handler(job: Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1

    stats = await make_pool(transport, handler).run()
    assert stats.ok == 200 and len(store.by_status("done")) == 200
    assert peak == 4
    assert max(transport.asked) <= 8  # never more than concurrency + buffer
    assert all(len(e.history) == 1 for e in store.entries.values())


async def test_backpressure_asks_only_for_free_room() -> None:
    store = MemoryStore()
    for i in range(50):
        store.add("k", {"i": i})
    transport = CountingTransport(store)
    gate = asyncio.Event()

    async def handler(job: Job) -> None:
        await gate.wait()

    pool = make_pool(transport, handler, once=False)
    task = asyncio.create_task(pool.run())
    await until(lambda: pool.in_flight >= 8, "4 running and 4 buffered")
    # Then a while for a pool that asked past its room to take more (a slow machine can only
    # make this while shorter, never fail the test).
    await asyncio.sleep(0.1)
    assert pool.in_flight == 8  # 4 running + 4 buffered, the rest left on the server
    assert len(store.by_status("pending")) == 42
    gate.set()
    await until(lambda: len(store.by_status("done")) == 50, "all 50 to be done")
    pool.stop()
    await asyncio.wait_for(task, 10)


async def test_outcomes_retry_dead_malformed_timeout() -> None:
    store = MemoryStore()
    ok = store.add("ok", {})
    flaky = store.add("flaky", {}, max_attempts=3)
    perm = store.add("perm", {})
    bad = store.add("bad", ["not", "an", "object"])
    slow = store.add("slow", {}, max_attempts=1)
    seen: dict[str, int] = {}

    async def handler(job: Job) -> None:
        seen[job.kind] = seen.get(job.kind, 0) + 1
        if job.kind == "flaky" and job.attempt < 3:
            raise RuntimeError(f"try {job.attempt}")
        if job.kind == "perm":
            raise PermanentError("cannot ever work")
        if job.kind == "slow":
            await asyncio.sleep(1)

    await make_pool(MemoryTransport(store), handler, job_timeout=0.1).run()
    e = store.entries
    assert e[ok].status == "done"
    assert e[flaky].status == "done" and e[flaky].attempts == 3
    assert e[flaky].history == ["retry", "retry", "ack"]
    assert e[perm].status == "dead" and e[perm].last_error == "PermanentError: cannot ever work"
    assert e[bad].status == "dead" and "not a JSON object" in (e[bad].last_error or "")
    assert "bad" not in seen  # a malformed job never reaches the handler
    assert e[slow].status == "dead" and "JobTimeout" in (e[slow].last_error or "")


async def test_exhausted_attempts_end_dead_with_the_error() -> None:
    store = MemoryStore()
    job_id = store.add("k", {}, max_attempts=3)

    async def handler(job: Job) -> None:
        raise ValueError("still broken")

    await make_pool(MemoryTransport(store), handler).run()
    entry = store.entries[job_id]
    assert entry.status == "dead" and entry.attempts == 3
    assert "ValueError: still broken" in (entry.last_error or "") and "3 of 3" in (entry.last_error or "")


async def test_retry_delay_is_respected_and_once_still_ends() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})

    async def handler(job: Job) -> None:
        raise Retry(delay=60)

    stats = await asyncio.wait_for(make_pool(MemoryTransport(store), handler).run(), 5)
    assert stats.retried == 1 and store.entries[job_id].status == "pending"  # not yet due


async def test_plain_def_handler_runs_in_a_thread() -> None:
    store = MemoryStore()
    store.add("k", {})
    threads: list[int] = []

    def handler(job: Job) -> None:
        threads.append(threading.get_ident())

    await make_pool(MemoryTransport(store), as_async(handler)).run()
    assert threads and threads[0] != threading.get_ident()


async def test_graceful_stop_finishes_running_and_releases_unstarted() -> None:
    store = MemoryStore()
    for i in range(20):
        store.add("k", {"i": i})
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(0.3)

    pool = make_pool(MemoryTransport(store), handler, once=False)
    task = asyncio.create_task(pool.run())
    await started.wait()
    pool.stop()
    stats = await task
    assert stats.ok == 4 and stats.released == 4  # the running finished, the buffered went back
    pending = store.by_status("pending")
    assert len(pending) == 16 and all(e.attempts == 0 for e in pending)  # attempt not counted
    assert not store.by_status("running")


async def test_shutdown_deadline_interrupts_and_retries_running_jobs() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(30)

    pool = make_pool(MemoryTransport(store), handler, once=False, shutdown_timeout=0.1)
    task = asyncio.create_task(pool.run())
    await started.wait()
    pool.stop()
    stats = await asyncio.wait_for(task, 5)
    entry = store.entries[job_id]
    assert stats.retried == 1 and entry.status == "pending"
    assert "ShutdownInterrupted" in (entry.last_error or "")


async def test_second_stop_returns_at_once_leaving_running_jobs_unsettled() -> None:
    store = MemoryStore()
    store.add("k", {})
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(30)

    pool = make_pool(MemoryTransport(store), handler, once=False, shutdown_timeout=60)
    task = asyncio.create_task(pool.run())
    await started.wait()
    pool.stop()
    await asyncio.sleep(0.05)
    pool.stop()
    await asyncio.wait_for(task, 2)
    assert pool.forced and store.by_status("running")  # left for lease expiry / redelivery


@pytest.mark.parametrize("count", [0, 1, 37])
async def test_once_terminates_whatever_the_backlog(count: int) -> None:
    store = MemoryStore()
    for i in range(count):
        store.add("k", {"i": i})

    async def handler(job: Job) -> None:
        raise ValueError("always")

    stats = await asyncio.wait_for(make_pool(MemoryTransport(store), handler).run(), 10)
    assert stats.dead == count and len(store.by_status("dead")) == count
