"""What a failed attempt logs: the kind, the delay until the next attempt, the traceback once."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from jobq.core.errors import PermanentError
from jobq.core.job import Job
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


def deep_failure(job: Job) -> None:
    raise RuntimeError(f"smtp refused {job.payload['to']}")


async def test_a_retry_logs_its_delay_and_traceback_and_the_dead_end_is_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    flaky = store.add("email", {"to": "a@example.com"}, max_attempts=2)
    bad = store.add("email", {"to": "b@example.com", "permanent": True})

    async def handler(job: Job) -> None:
        if job.payload.get("permanent"):
            raise PermanentError("no such mailbox")
        deep_failure(job)

    pool = WorkerPool(MemoryTransport(store), handler,
                      RetryPolicy(base_delay=0.25, max_delay=0.25, jitter=False),
                      concurrency=1, buffer_size=0, job_timeout=5.0, shutdown_timeout=5.0,
                      poll_timeout=0.05, once=False)
    with caplog.at_level(logging.WARNING, logger="jobq.pool"):
        running = asyncio.create_task(pool.run())
        deadline = time.monotonic() + 10
        while {store.entries[flaky].status, store.entries[bad].status} != {"dead"}:
            assert time.monotonic() < deadline, store.entries
            await asyncio.sleep(0.02)
        pool.stop()
        await asyncio.wait_for(running, 10)
    lines = {(r.levelname, r.getMessage().split(" after ")[0]): r for r in caplog.records}
    retried = lines[("WARNING", f"job {flaky} (email) attempt 1/2 retried in 0.25s")]
    assert retried.getMessage().endswith("RuntimeError: smtp refused a@example.com")
    assert retried.exc_info is not None and "deep_failure" in caplog.text  # the handler's frame
    dead = lines[("ERROR", f"job {flaky} (email) attempt 2/2 dead")]
    assert dead.exc_info is not None
    assert lines[("ERROR", f"job {bad} (email) attempt 1/5 dead")].exc_info is not None
    assert caplog.text.count("Traceback") == 3  # once per failed attempt
