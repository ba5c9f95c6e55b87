"""A handler that blocks the event loop is noticed and named, and costs no one else's job.

Two consumers. The blocker holds its consumer's loop for 5 s: longer than the 2 s lease in
lease mode, longer than RabbitMQ's 1 s heartbeat allows, so the other consumer gets the jobs
it held (rescued; redelivered). The watchdog names the blocking job with its stack while the
loop is still blocked, /healthz goes red before the lease or heartbeat can expire, nothing
blames PostgreSQL, and on waking the consumer starts none of the jobs it had taken and lost
(before Delivery.lapsed it started them, and they ran twice).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from tests.conftest import PG_DSN, fetch, jobs_table, pg_args, run_cli, schema_env
from tests.contract.backends import Backend, backend_under_test
from tests.scrape import Running, get, scrape, value, wait_for

pytestmark = pytest.mark.integration

BLOCK_S = 5.0
WORK = 60
SETTINGS = {"POSTGRES__LEASE": "2", "POSTGRES__RESCUE_INTERVAL": "0.5", "RABBITMQ__HEARTBEAT": "1",
            "LOG__SUMMARY_INTERVAL": "0"}


@pytest.fixture(params=["postgres-lease", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, request.param) as backend:
        yield backend


def _consumer(backend: Backend, directory: Path, *extra: str) -> subprocess.Popen[str]:
    return backend.start("consumer", "-p", "tests.processors:loop_blocker", "-a",
                         f"directory={directory}", "-a", f"block_s={BLOCK_S}", "-n", "4",
                         "--shutdown-timeout", "1", *extra)


def test_a_blocked_loop_is_named_and_its_lost_jobs_are_not_started(
        backend: Backend, tmp_path: Path) -> None:
    backend.set(**SETTINGS)
    backend.produce(1, "--kind", "block")
    backend.produce(WORK, "--kind", "work")
    blocked = Running(_consumer(backend, tmp_path, "--metrics-port", "0"))
    try:
        wait_for(lambda: _blocker(tmp_path) is not None, 30, "the blocking job to start")
        # Red while the loop is blocked, before the lease or the heartbeat (2 s) runs out:
        # from 2 s on, read from the metrics thread, which the blocked loop does not hold.
        wait_for(lambda: get(f"{blocked.base}/healthz", timeout=2)[0] == 503, BLOCK_S - 1,
                 "/healthz to fail while the loop is blocked")
        # The other consumer (whose "block" jobs do not block) gets what the blocked one lost.
        rescuer = _consumer(backend, tmp_path, "-a", "block_s=0")
        try:
            wait_for(lambda: len(_ended(tmp_path)) == WORK + 1, 60, "every job done")
        finally:
            rescuer.terminate()
            assert rescuer.wait(30) == 0
        wait_for(lambda: get(f"{blocked.base}/healthz", timeout=2) == (200, "ok\n"),
                 BLOCK_S + 5, "/healthz green again once the loop is free")
        wait_for(lambda: value(scrape(blocked.base), "jobq_loop_blocks_total") == 1, 5,
                 "the block counted")
        blocked_s = value(scrape(blocked.base), "jobq_loop_blocked_seconds_total")
        assert blocked_s is not None and BLOCK_S - 1.5 < blocked_s < BLOCK_S + 1.5, blocked_s
    finally:
        assert blocked.stop() == 0
    log = "".join(blocked.lines)
    blocker = _blocker(tmp_path)
    assert f"job {blocker} (block) blocks it" in log, log
    assert "time.sleep(block_s)" in log, log  # the loop thread's stack, where it blocks
    assert "free again after" in log and f"by job {blocker} (block)" in log, log
    assert "no answer from PostgreSQL" not in log, log
    # Once awake it started none of the jobs it held and lost: a job that ran in both
    # consumers had started in the blocked one before its loop woke.
    runs, pid = _runs(tmp_path), str(blocked.proc.pid)
    woke = next(at for who, what, _, at in runs[str(blocker)] if who == pid and what == "end")
    twice = {job_id: [at for who, what, _, at in records if who == pid and what == "start"]
             for job_id, records in runs.items() if len({r[0] for r in records}) > 1}
    late = {job_id: starts for job_id, starts in twice.items() if starts and max(starts) >= woke}
    assert not late, f"started after the loop woke at {woke}: {late}\n{log}"
    # Its stop summary says what the queue has: the acks it could not write (the blocker's,
    # whose job the other consumer had rescued) are not counted ok (before, they were). (On
    # RabbitMQ an ack sent on a connection that then turns out dead is not known to be lost.)
    if backend.schema is not None:
        summary = dict(item.split("=") for item in
                       log.split("stopped: ", 1)[1].splitlines()[0].split())
        assert int(summary["not_written"]) >= 1, summary
        mine = fetch(PG_DSN, sql.SQL("SELECT count(*) FROM {} WHERE queue = %s AND status = 'done' "
                                     "AND locked_by LIKE %s").format(jobs_table(backend.schema)),
                     (backend.queue, f"%:{pid}:%"))[0][0]
        assert int(summary["ok"]) == mine, (summary, mine)


def _runs(directory: Path) -> dict[str, list[tuple[str, str, str, float]]]:
    """job id -> its (pid, start|end, kind, epoch) records."""
    out: dict[str, list[tuple[str, str, str, float]]] = {}
    for path in directory.glob("*.runs"):
        for line in path.read_text().splitlines():
            what, job_id, kind, at = line.split()
            out.setdefault(job_id, []).append((path.stem, what, kind, float(at)))
    return out


def _blocker(directory: Path) -> str | None:
    return next((job_id for job_id, records in _runs(directory).items()
                 if any(kind == "block" for _, _, kind, _ in records)), None)


def _ended(directory: Path) -> set[str]:
    return {job_id for job_id, records in _runs(directory).items()
            if any(what == "end" for _, what, _, _ in records)}


def test_a_start_up_that_holds_the_loop_is_no_alarm(schema: str, queue_name: str) -> None:
    """The watchdog watches a consumer whose transports are open: before that nothing holds a
    lease. Before, it watched from the first moment, and on a loaded machine importing the
    backend alone held the loop over its 1 s threshold: a warning on every start that blamed
    "jobq's own code or a library" and told to use a plain def (a start-up hook here)."""
    env = schema_env(schema, JOBQ_TEST_STARTUP_BLOCK="1.5")
    done = run_cli("consumer", *pg_args(queue_name), "-A", "tests.slow_start_app:app", "--once",
                   env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "nothing left to do" in done.stderr, done.stderr
    assert "event loop blocked" not in done.stderr, done.stderr
