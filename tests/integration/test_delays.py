"""Time means the same on both backends: delays, run_at and delayed retries run on time.

Each case runs the real consumer against the real server, on Postgres (lease and transaction
claim modes) and RabbitMQ (quorum and classic queues), with delays the old RabbitMQ tiers
overshot (2 s waited 5 s, 7 s waited 30 s). A job must never run before
its due time, and at most max(1 s, 2% of its delay) after it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob
from tests.conftest import (
    ROOT,
    cli_env,
    consuming,
    init_queue,
    schema_env,
    stop_cli,
    wait_until,
)
from tests.contract.backends import Backend
from tests.processors import due_runs

# 7 s hops through the 5 s and 1 s tiers and is held for the rest, as longer delays hop
# through the longer tiers (Topology.hop, unit-tested). Delays up to 40 s on every target
# are measured by `python -m benchmarks.lateness`, outside the default run (a 31 s case here
# cost half a minute of it).
DELAYS = (0.3, 2.0, 7.0)
RETRIES = (2.0, 7.0)
VARIANTS = ("lease", "transaction", "quorum", "classic")
POLL = 3.0  # poll_interval, where a job hidden behind a running one would be found


@pytest.fixture(params=VARIANTS)
def timed(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """The backend and claim mode or queue type under test, on a queue of its own."""
    if request.param in ("lease", "transaction"):
        schema = request.getfixturevalue("schema")
        yield Backend("postgres", queue_name, schema_env(schema, JOBQ_POSTGRES__CLAIM=request.param),
                      schema=schema)
        return
    request.getfixturevalue("amqp_url")
    backend = Backend("rabbitmq", queue_name, cli_env(JOBQ_RABBITMQ__QUEUE_TYPE=request.param))
    init_queue("rabbitmq", queue_name, backend.env)
    try:
        yield backend
    finally:
        backend.cleanup()


async def enqueue(backend: Backend, jobs: list[tuple[str, NewJob]]) -> dict[str, tuple[str, float]]:
    """Enqueue each job on its own (so its due time is taken just before); id -> (name, due)."""
    settings = load_settings(ROOT / "configs" / f"{backend.transport}.yaml",
                             {"queue": backend.queue}, env=backend.env)
    due: dict[str, tuple[str, float]] = {}
    async with connect_publisher(settings) as publisher:
        for name, job in jobs:
            now = time.time()
            at = job.run_at.timestamp() if job.run_at else now + job.delay
            due[await publisher.enqueue(job)] = (name, max(at, now))
    return due


@pytest.mark.slow
def test_delays_run_at_and_retries_run_on_time(timed: Backend, tmp_path: Path) -> None:
    consumer = timed.start("consumer", "--processor", "tests.processors:due_record",
                           "-a", f"directory={tmp_path}", "--concurrency", "8")
    try:
        consuming(consumer)  # before the first job is due: its start-up is not lateness
        now = datetime.now(UTC)
        delays = DELAYS
        jobs = [(f"delay {d:g}s", NewJob(kind="timed", delay=d)) for d in delays]
        jobs += [("run_at past", NewJob(kind="timed", run_at=now - timedelta(minutes=5))),
                 ("run_at +3s", NewJob(kind="timed", run_at=now + timedelta(seconds=3)))]
        jobs += [(f"retry {r:g}s", NewJob(kind="timed", payload={"retry": r})) for r in RETRIES]
        due = asyncio.run(enqueue(timed, jobs))
        expected = len(jobs) + len(RETRIES)
        assert wait_until(lambda: len(due_runs(tmp_path)) >= expected, max(delays) + 15), (
            due_runs(tmp_path))
    finally:
        stop_cli(consumer, 30)

    lateness: dict[str, float] = {}
    first_runs = {job_id: at for job_id, attempt, at in due_runs(tmp_path) if attempt == 1}
    for job_id, attempt, at in due_runs(tmp_path):
        name, due_at = due[job_id]
        wait = float(name.split()[1].rstrip("s")) if name.startswith(("delay", "retry")) else 3.0
        if name.startswith("retry"):
            if attempt == 1:
                continue
            due_at = first_runs[job_id] + wait  # the retry was due its delay after the failure
        elif name == "run_at past":
            wait = 0.0
        lateness[name] = at - due_at
        assert at >= due_at - 0.005, f"{name}: ran {due_at - at:.3f}s before it was due"
        assert at - due_at <= max(1.0, 0.02 * wait), f"{name}: ran {at - due_at:.3f}s late"
    assert len(lateness) == len(jobs), lateness
    print(f"{timed.transport} {timed.env.get('JOBQ_POSTGRES__CLAIM', '')}"
          f"{timed.env.get('JOBQ_RABBITMQ__QUEUE_TYPE', '')} lateness (s): "
          + ", ".join(f"{k} {v:.3f}" for k, v in lateness.items())
          + f"; median {statistics.median(lateness.values()):.3f}")


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_a_running_job_does_not_hide_the_next_delayed_one(schema: str, queue_name: str,
                                                          tmp_path: Path, claim: str) -> None:
    # Before: in transaction mode a running job stays pending with its run_at in the past, so
    # the idle consumer's look for the next due time found that one and waited a whole
    # poll_interval (POLL) instead of 0.3 s.
    backend = Backend("postgres", queue_name, schema_env(
        schema, JOBQ_POSTGRES__CLAIM=claim, JOBQ_POSTGRES__POLL_INTERVAL=str(POLL)),
        schema=schema)
    consumer = backend.start("consumer", "--processor", "tests.processors:due_record",
                             "-a", f"directory={tmp_path}", "--concurrency", "4")
    try:
        consuming(consumer)
        due = asyncio.run(enqueue(backend, [("slow", NewJob(kind="timed", payload={"sleep": 4})),
                                            ("delay 0.3s", NewJob(kind="timed", delay=0.3))]))
        assert wait_until(lambda: len(due_runs(tmp_path)) >= 2, 15), due_runs(tmp_path)
    finally:
        stop_cli(consumer, 30)
    (late,) = [at - due[job_id][1] for job_id, _, at in due_runs(tmp_path)
               if due[job_id][0] == "delay 0.3s"]
    # Hidden, it runs a poll interval after its due time, less its 0.3 s; woken on time, at
    # once: half the interval tells the two apart however slow a loaded machine is.
    assert 0 <= late < POLL / 2, late
