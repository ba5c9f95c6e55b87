"""A handler can tell a redelivery: ``job.redelivered`` after its consumer died mid-job.

A consumer is killed (SIGKILL) while it runs jobs; the jobs it held run again with attempt 1
(the death is not charged) and ``redelivered`` True, on PostgreSQL in both claim modes and on
RabbitMQ; the jobs it never took run with it False; the flag outlives a clean retry. Before
``Job.redelivered`` a handler could not tell the second run from the first.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.backends import Backend, backend_under_test
from tests.processors import lines
from tests.scrape import wait_for

pytestmark = pytest.mark.integration

JOBS = 30


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, request.param, {
            "JOBQ_POSTGRES__LEASE": "2", "JOBQ_POSTGRES__RESCUE_INTERVAL": "0.5"}) as backend:
        yield backend


def test_the_jobs_of_a_killed_consumer_run_again_marked_redelivered(
        backend: Backend, tmp_path: Path) -> None:
    backend.produce(JOBS, "--kind", "work")
    victim = backend.start("consumer", "-p", "tests.processors:loop_blocker", "-a",
                           f"directory={tmp_path}", "-a", "sleep_ms=600000", "-n", "4")
    try:
        wait_for(lambda: len(_started(tmp_path)) == 4, 30, "4 jobs running in the victim")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    started = _started(tmp_path)
    after = backend.start("consumer", "-p", "tests.processors:redelivery_record", "-a",
                          f"directory={tmp_path}", "-n", "4", "--shutdown-timeout", "1")
    try:
        wait_for(lambda: _finished(tmp_path) == JOBS, 60, "every job run to its end")
    finally:
        _stop(after)
    runs = [line.split() for line in lines(tmp_path, "redelivered")]
    first = {job_id: (int(attempt), flag == "1") for job_id, attempt, flag in reversed(runs)}
    assert all(first[job_id] == (1, True) for job_id in started), (started, runs)
    fresh = [job_id for job_id, (_, flag) in first.items() if not flag]
    assert len(fresh) >= JOBS - 12, runs  # never taken by the victim (at most its prefetch)
    assert all(first[job_id][0] == 1 for job_id in fresh), runs
    kept = {job_id: flag for job_id, attempt, flag in runs if attempt == "2"}
    assert set(kept) >= started and all(flag == "1" for flag in kept.values()), runs


def _started(directory: Path) -> set[str]:
    return {line.split()[1] for line in lines(directory, "runs") if line.startswith("start")}


def _finished(directory: Path) -> int:
    """Jobs whose last recorded run ended them: not redelivered, or redelivered on attempt 2."""
    last: dict[str, tuple[str, str]] = {}
    for line in lines(directory, "redelivered"):
        job_id, attempt, flag = line.split()
        last[job_id] = (attempt, flag)
    return sum(1 for attempt, flag in last.values() if flag == "0" or attempt != "1")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    assert proc.wait(30) == 0
