"""A handler that blocks the event loop is noticed and named, and costs no one else's job.

Lease mode, two consumers, a 2 s lease: the blocker holds its consumer's loop for 5 s, so its
leases lapse and the other consumer rescues its jobs. The watchdog names the blocking job
(with its stack) while the loop is still blocked, /healthz goes red before the lease can
expire, nothing blames PostgreSQL, and on waking the consumer starts none of the jobs it had
taken and lost (before Delivery.lapsed it started them, and they ran twice).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from psycopg import sql

from tests.conftest import PG_DSN, fetch, jobs_table, pg_args, run_cli, schema_env, start_cli
from tests.scrape import Running, get, wait_for

pytestmark = pytest.mark.integration

BLOCK_S = 5.0
SETTINGS = {"JOBQ_POSTGRES__LEASE": "2", "JOBQ_POSTGRES__RESCUE_INTERVAL": "0.5",
            "JOBQ_LOG__SUMMARY_INTERVAL": "0"}


def _consumer(schema: str, queue: str, directory: Path, *extra: str) -> subprocess.Popen[str]:
    return start_cli("consumer", *pg_args(queue), "-p", "tests.processors:loop_blocker",
                     "-a", f"directory={directory}", "-a", f"block_s={BLOCK_S}", "-n", "4",
                     "--shutdown-timeout", "1", *extra, env=schema_env(schema, **SETTINGS))


def test_a_blocked_loop_is_named_and_its_lost_jobs_are_not_started(
        schema: str, queue_name: str, tmp_path: Path) -> None:
    env = schema_env(schema)
    for kind, count in (("block", "1"), ("work", "60")):
        assert run_cli("producer", *pg_args(queue_name), "--kind", kind, "--count", count,
                       env=env).returncode == 0
    blocked = Running(_consumer(schema, queue_name, tmp_path, "--metrics-port", "0"))
    try:
        blocker = _ids(schema, queue_name, "block")[0]
        wait_for(lambda: blocker in _runs(tmp_path), 30, "the blocking job to start")
        # Red while the loop is blocked, before the lease (2 s) runs out: from 1 s (half the
        # lease) on, read from the metrics thread, which the blocked loop does not hold.
        wait_for(lambda: get(f"{blocked.base}/healthz", timeout=2)[0] == 503, BLOCK_S - 1,
                 "/healthz to fail while the loop is blocked")
        # The other consumer (whose "block" jobs do not block) rescues what the lease lost.
        rescuer = _consumer(schema, queue_name, tmp_path, "-a", "block_s=0")
        try:
            wait_for(lambda: _count(schema, queue_name, "done") == 61, 60, "every job done")
        finally:
            rescuer.terminate()
            assert rescuer.wait(30) == 0
        wait_for(lambda: get(f"{blocked.base}/healthz", timeout=2) == (200, "ok\n"),
                 BLOCK_S + 5, "/healthz green again once the loop is free")
    finally:
        assert blocked.stop() == 0
    log = "".join(blocked.lines)
    assert f"job {blocker} (block) blocks it" in log, log
    assert "time.sleep(block_s)" in log, log  # the loop thread's stack, where it blocks
    assert "free again after" in log and f"by job {blocker} (block)" in log, log
    assert "no answer from PostgreSQL" not in log, log
    # Once awake it started none of the jobs it held and lost: a job that ran in both
    # consumers had started in the blocked one before its loop woke.
    runs, pid = _runs(tmp_path), str(blocked.proc.pid)
    woke = next(at for who, what, at in runs[blocker] if who == pid and what == "end")
    twice = {job_id: [at for who, what, at in records if who == pid and what == "start"]
             for job_id, records in runs.items() if len({who for who, _, _ in records}) > 1}
    late = {job_id: starts for job_id, starts in twice.items() if max(starts) >= woke}
    assert not late, f"started after the loop woke at {woke}: {late} {[(j, runs[j]) for j in late]}\n{log}"


def _runs(directory: Path) -> dict[str, list[tuple[str, str, float]]]:
    """job id -> its (pid, start|end, epoch) records."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for path in directory.glob("*.runs"):
        for line in path.read_text().splitlines():
            what, job_id, at = line.split()
            out.setdefault(job_id, []).append((path.stem, what, float(at)))
    return out


def _ids(schema: str, queue: str, kind: str) -> list[str]:
    query = sql.SQL("SELECT id FROM {} WHERE queue = %s AND kind = %s").format(jobs_table(schema))
    return [str(row[0]) for row in fetch(PG_DSN, query, (queue, kind))]


def _count(schema: str, queue: str, status: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE queue = %s AND status = %s").format(
        jobs_table(schema))
    return int(fetch(PG_DSN, query, (queue, status))[0][0])  # type: ignore[call-overload]
