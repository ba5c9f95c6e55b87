"""After a crash, lease mode's suspects run one at a time beside the rest of the queue.

A consumer is killed holding jobs; each comes back a suspect (isolate) and must run so that a
crash during its run is charged to it alone. They run one at a time per consumer, but beside
the other work: the queue does not wait for them (before, each suspect ran with nothing else
in flight and nothing received meanwhile, so recovery stopped the queue: 8 suspects took
24-35 s to clear on one consumer in a probe).
"""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import pytest
from psycopg import sql

from tests.conftest import PG_DSN, fetch, jobs_table, pg_args, run_cli, schema_env, start_cli
from tests.processors import lines
from tests.scrape import wait_for

pytestmark = pytest.mark.integration

SETTINGS = {"JOBQ_POSTGRES__LEASE": "2", "JOBQ_POSTGRES__RESCUE_INTERVAL": "0.5"}


def test_suspects_run_one_at_a_time_and_the_queue_goes_on_meanwhile(
        schema: str, queue_name: str, tmp_path: Path) -> None:
    env = schema_env(schema, **SETTINGS)
    assert run_cli("producer", *pg_args(queue_name), "--kind", "work", "--count", "20",
                   env=env).returncode == 0
    victim = start_cli("consumer", *pg_args(queue_name), "-p", "tests.processors:loop_blocker",
                       "-a", f"directory={tmp_path}", "-a", "sleep_ms=600000", "-n", "4", env=env)
    try:
        wait_for(lambda: len(_starts(tmp_path)) == 4, 30, "4 jobs running in the victim")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    assert run_cli("producer", *pg_args(queue_name), "--kind", "fresh", "--count", "200",
                   env=env).returncode == 0
    rescuer = start_cli("consumer", *pg_args(queue_name), "-p", "tests.processors:loop_blocker",
                        "-a", f"directory={tmp_path}", "-a", "sleep_ms=100", "-n", "4",
                        "--shutdown-timeout", "1", env=env)
    try:
        wait_for(lambda: _count(schema, queue_name, "done") == 220, 60, "every job done")
    finally:
        rescuer.terminate()
        assert rescuer.wait(30) == 0
    suspects = {str(row[0]) for row in fetch(PG_DSN, sql.SQL(
        "SELECT id FROM {} WHERE queue = %s AND isolate AND attempts = 1").format(
            jobs_table(schema)), (queue_name,))}
    assert len(suspects) >= 4, suspects  # what the victim held, refunded: no attempt charged
    runs = _windows(tmp_path, str(rescuer.pid))
    windows = sorted(runs[job_id] for job_id in suspects)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start >= end, windows  # one suspect at a time
    # While other work remained, other jobs started during every suspect's run.
    last_other = max(start for job_id, (start, _) in runs.items() if job_id not in suspects)
    beside = [[job_id for job_id, (start, _) in runs.items()
               if job_id not in suspects and s <= start < e] for s, e in windows if s < last_other]
    assert beside and all(beside), (windows, runs)
    # And one after another without a wait between them (a suspect settled wakes the claim
    # of the next): 100 ms each, plus an ack flush and a claim.
    span = windows[-1][1] - windows[0][0]
    assert span < 0.3 * len(windows), windows


def _starts(directory: Path) -> list[str]:
    return [line for line in lines(directory, "runs") if line.startswith("start")]


def _windows(directory: Path, pid: str) -> dict[str, tuple[float, float]]:
    """job id -> (start, end) of its run in process ``pid``."""
    starts: dict[str, float] = {}
    out: dict[str, tuple[float, float]] = {}
    for line in (directory / f"{pid}.runs").read_text().splitlines():
        what, job_id, _, at = line.split()
        if what == "start":
            starts[job_id] = float(at)
        else:
            out[job_id] = (starts[job_id], float(at))
    return out


def _count(schema: str, queue: str, status: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE queue = %s AND status = %s").format(
        jobs_table(schema))
    return int(fetch(PG_DSN, query, (queue, status))[0][0])  # type: ignore[call-overload]
