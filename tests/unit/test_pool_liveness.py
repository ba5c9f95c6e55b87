"""Issue 19: liveness (stall detection, /healthz, SIGUSR1 stacks) and plain-def handlers (item 6)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jobq import Job
from jobq.config import ConsumerConfig
from jobq.observability.metrics import Metrics, serve
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.lifecycle import State
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from jobq.worker.routing import build_handler
from tests.conftest import until


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_a_pool_holding_jobs_without_progress_is_stalled_and_healthz_fails() -> None:
    store = MemoryStore()
    for i in range(3):
        store.add("k", {"n": i})
    hang = asyncio.Event()

    async def handle(job: Job) -> None:
        await hang.wait()  # stuck (no job timeout to cut it)

    pool = WorkerPool(MemoryTransport(store), handle, RetryPolicy(), concurrency=1, buffer_size=2,
                      job_timeout=None, shutdown_timeout=0.1, poll_timeout=0.01,
                      stall_timeout=0.3)
    metrics = Metrics("memory", "q")
    metrics.watch(pool, object())
    server = serve(metrics, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}/healthz"
    run = asyncio.create_task(pool.run())
    try:
        await asyncio.sleep(0.1)
        assert pool.in_flight == 3 and not pool.stalled(time.monotonic())
        assert await asyncio.to_thread(_get, url) == (200, "ok\n")
        await asyncio.sleep(0.4)
        assert pool.stalled(time.monotonic())
        status, body = await asyncio.to_thread(_get, url)
        assert status == 503
        assert body == "no job started or settled for over 0.3s while 3 are held\n"
    finally:
        hang.set()
        pool.stop()
        await asyncio.wait_for(run, 5)
        server.shutdown()
    assert not pool.stalled(time.monotonic())  # nothing held any more


def test_the_default_stall_timeout_is_the_job_timeout_plus_a_minute() -> None:
    pool = WorkerPool(MemoryTransport(MemoryStore()), None,  # type: ignore[arg-type]
                      RetryPolicy(), concurrency=1, buffer_size=0, job_timeout=300.0,
                      shutdown_timeout=1.0)
    assert pool._stall_timeout == 360.0


async def test_a_dead_worker_fails_healthz_until_replaced() -> None:
    store = MemoryStore()
    store.add("k", {})
    started = asyncio.Event()

    async def handle(job: Job) -> None:
        started.set()
        await asyncio.sleep(10)

    pool = WorkerPool(MemoryTransport(store), handle, RetryPolicy(), concurrency=2, buffer_size=0,
                      job_timeout=None, shutdown_timeout=0.1, poll_timeout=0.01)
    run = asyncio.create_task(pool.run())
    await asyncio.wait_for(started.wait(), 5)
    assert pool.problem(time.monotonic()) is None and pool.workers_alive == 2
    pool._life._phase = State.STOPPED  # no replacement: what /healthz shows while a slot has no worker
    pool._workers.tasks[1].cancel()
    await asyncio.sleep(0.01)
    assert pool.problem(time.monotonic()) == "1 of 2 workers alive"
    pool._life._phase = State.RUNNING
    pool.stop()
    pool.stop()  # at once
    await asyncio.wait_for(run, 5)


async def test_sigusr1_logs_every_tasks_and_threads_stack(caplog: pytest.LogCaptureFixture) -> None:
    from jobq.observability.stacks import (
        stacks_on_signal,  # here: main had no such module (each test fails alone)
    )

    release = threading.Event()

    def blocked_thread() -> None:
        release.wait(5)

    async def parked_coroutine() -> None:
        await asyncio.sleep(10)

    thread = threading.Thread(target=blocked_thread, name="stuck-thread")
    thread.start()
    task = asyncio.create_task(parked_coroutine(), name="parked-task")
    log = logging.getLogger("jobq.test")
    try:
        with caplog.at_level(logging.WARNING, "jobq.test"), stacks_on_signal(log):
            await asyncio.sleep(0)
            os.kill(os.getpid(), signal.SIGUSR1)
            await until(lambda: caplog.records, "the stacks' log record", 10)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # put back afterwards
    finally:
        release.set()
        task.cancel()
        thread.join()
    text = caplog.records[0].getMessage()
    assert text.startswith("stacks on SIGUSR1:")
    assert "--- task parked-task" in text and "in parked_coroutine" in text
    assert "--- thread stuck-thread" in text and "in blocked_thread" in text
    assert "--- thread MainThread" in text


async def test_a_sync_handler_that_overran_never_runs_twice_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    job_id = store.add("k", {})
    for _ in range(3):
        store.add("other", {})
    consumer = ConsumerConfig(processor="tests.processors:sync_overrun", concurrency=2,
                              processor_args={"directory": str(tmp_path), "sleep_s": 0.6})
    pool = WorkerPool(MemoryTransport(store), build_handler(consumer),
                      RetryPolicy(base_delay=0.0, jitter=False), concurrency=2, buffer_size=2,
                      job_timeout=0.1, shutdown_timeout=5.0, poll_timeout=0.01, once=True)
    with caplog.at_level(logging.WARNING):
        stats = await asyncio.wait_for(pool.run(), 10)
    runs: dict[tuple[str, str], dict[str, float]] = {}
    for line in (tmp_path / "runs.log").read_text().splitlines():
        what, jid, attempt, at = line.split()
        runs.setdefault((jid, attempt), {})[what] = float(at)
    first, second = runs[(job_id, "1")], runs[(job_id, "2")]
    assert second["start"] >= first["end"]  # before: attempt 2 ran while attempt 1's thread slept
    assert stats.retried >= 1 and store.entries[job_id].status == "done"
    assert any("cannot be interrupted" in r.getMessage() for r in caplog.records)


async def test_the_thread_pool_is_sized_for_concurrency(tmp_path: Path) -> None:
    # One more than asyncio's default executor has threads on this machine: before, the
    # last handlers waited for a thread, the barrier broke and every job failed.
    concurrency = min(32, (os.cpu_count() or 1) + 4) + 1
    store = MemoryStore()
    for _ in range(concurrency):
        store.add("k", {}, max_attempts=1)
    consumer = ConsumerConfig(processor="tests.processors:sync_barrier", concurrency=concurrency,
                              processor_args={"parties": concurrency, "directory": str(tmp_path)})
    pool = WorkerPool(MemoryTransport(store), build_handler(consumer), RetryPolicy(),
                      concurrency=concurrency, buffer_size=0, job_timeout=30.0,
                      shutdown_timeout=5.0, poll_timeout=0.01, once=True)
    stats = await asyncio.wait_for(pool.run(), 20)
    assert stats.ok == concurrency and stats.dead == 0
    threads = set((tmp_path / "threads.log").read_text().split())
    assert len(threads) == concurrency
