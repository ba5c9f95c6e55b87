"""The Postgres lease-mode consumer against the real server, driven through the real CLIs."""

from __future__ import annotations

import collections
import itertools
import signal
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.transports.postgres.sql import Queries, migrations
from tests.conftest import Stderr, fetch, pg_args, run_cli, schema_env, start_cli, wait_until
from tests.processors import completions

RECORD = "tests.processors:record"


def jobs(schema: str) -> sql.Composed:
    return sql.SQL("{}").format(sql.Identifier(schema, "jobs"))


def status_counts(dsn: str, schema: str, queue: str) -> dict[str, int]:
    q = sql.SQL("SELECT status, count(*) FROM {} WHERE queue = %s GROUP BY status").format(jobs(schema))
    return {str(s): int(n) for s, n in fetch(dsn, q, [queue])}  # type: ignore[call-overload]


def produce(schema: str, queue: str, count: int, *extra: str) -> None:
    result = run_cli("producer", *pg_args(queue), "--count", str(count), *extra, env=schema_env(schema))
    assert result.returncode == 0, result.stderr



def test_three_consumers_drain_5000_jobs_exactly_once(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 5000)
    procs = [start_cli("consumer", *pg_args(queue_name), "--once", "-p", RECORD,
                       "-a", f"directory={tmp_path}", "-n", "16", env=schema_env(schema))
             for _ in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    done = completions(tmp_path)
    assert len(done) == 5000 and len(set(done)) == 5000  # none lost, none twice
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 5000}
    assert len(list(tmp_path.glob("*.log"))) == 3  # all three took part


def test_kill_9_mid_batch_loses_nothing(pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 300)
    env = schema_env(schema, JOBQ_POSTGRES__LEASE="2", JOBQ_POSTGRES__RESCUE_INTERVAL="0.3")
    victim = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                       "-a", "sleep_ms=50", "-n", "4", env=env)
    assert wait_until(lambda: len(completions(tmp_path)) >= 8, 20)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    held = status_counts(pg_dsn, schema, queue_name).get("running", 0)
    assert held > 0  # it died holding claimed jobs
    rescuer = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                        "-n", "32", env=env)
    try:
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"done": 300}, 40)
    finally:
        rescuer.send_signal(signal.SIGTERM)
        _, err = rescuer.communicate(timeout=30)
    assert rescuer.returncode == 0, err
    done = collections.Counter(completions(tmp_path))
    assert len(done) == 300  # every job completed at least once
    assert "rescued" in err


def test_job_that_kills_its_process_ends_dead_after_max_attempts(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 1, "--max-attempts", "3")
    env = schema_env(schema, JOBQ_POSTGRES__LEASE="1", JOBQ_POSTGRES__RESCUE_INTERVAL="0.2")
    exits = []
    for _ in range(8):
        proc = run_cli("consumer", *pg_args(queue_name), "-p", "crash", "--once", env=env, timeout=30)
        exits.append(proc.returncode)
        if status_counts(pg_dsn, schema, queue_name).get("dead"):
            break
        time.sleep(1.3)  # let the lease expire; the next consumer rescues it at start
    assert exits.count(137) == 3, exits  # three attempts, each killed its process
    row = fetch(pg_dsn, sql.SQL("SELECT status, attempts, last_error FROM {}").format(jobs(schema)))
    status, attempts, error = row[0]
    assert (status, attempts) == ("dead", 3)
    assert "lease expired on attempt 3 of 3" in str(error)


def test_a_consumer_whose_lease_expired_cannot_overwrite_the_outcome_of_the_new_holder(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    # The stale consumer's lease (1 s) expires mid-job (no heartbeat for 100 s); the holder
    # rescues the job and runs it. The stale one then dead-letters it, the holder succeeds:
    # the job must end done, as the holder ran it, not dead.
    produce(schema, queue_name, 1, "--kind", "doomed")
    stale_env = schema_env(schema, JOBQ_POSTGRES__LEASE="1", JOBQ_POSTGRES__HEARTBEAT="100",
                           JOBQ_POSTGRES__RESCUE_INTERVAL="100", JOBQ_CONSUMER__BUFFER="0")
    stale = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path / 'a'}",
                      "-a", "sleep_ms=3000", "-a", "fail_kind=doomed", "-n", "1", env=stale_env)
    stale_err = Stderr(stale)
    holder = None
    ran = False
    try:
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"running": 1}, 20)
        holder = start_cli("consumer", *pg_args(queue_name), "-p", RECORD,
                           "-a", f"directory={tmp_path / 'b'}", "-a", "sleep_ms=3000", "-n", "1",
                           env=schema_env(schema, JOBQ_POSTGRES__RESCUE_INTERVAL="0.2"))
        ran = wait_until(lambda: completions(tmp_path / "b"), 20)
        if ran:  # (if not, the assertion below says so, with both consumers' logs)
            # The stale consumer's outcome was tried (its job fails 3 s in) and refused: it
            # says so once its write comes back empty. The holder's ack is written by its stop
            # below, at the latest. A stale write that went through leaves no such line.
            stale_err.wait_for(r"dead\(s\) not written", 20)
    finally:
        errs = []
        for proc in (stale, holder):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                errs.append(proc.communicate(timeout=30)[1])
        errs[0] = stale_err.text()  # the reader owns the stale consumer's stderr
    assert ran, f"the holder never ran the job; stale consumer:\n{errs[0]}\nholder:\n{errs[-1]}"
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 1}
    assert "1 dead(s) not written: the job's lease expired" in errs[0]
    assert not completions(tmp_path / "a")


def test_retries_wait_for_their_backoff_then_end_dead_with_the_error(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 2, "--max-attempts", "3")
    env = schema_env(schema, JOBQ_RETRY__BASE_DELAY="0.5", JOBQ_RETRY__JITTER="false",
                     JOBQ_POSTGRES__POLL_INTERVAL="0.05")
    proc = start_cli("consumer", *pg_args(queue_name), "-p", "tests.processors:fail_recording",
                     "-a", f"directory={tmp_path}", env=env)
    try:
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"dead": 2}, 20)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    attempts: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for file in tmp_path.glob("*.attempts"):
        for line in file.read_text().splitlines():
            job_id, attempt, at = line.split()
            attempts[job_id].append((int(attempt), float(at)))
    for runs in attempts.values():
        assert [a for a, _ in runs] == [1, 2, 3]
        gaps = [b - a for (_, a), (_, b) in itertools.pairwise(runs)]
        assert gaps[0] >= 0.5 - 0.01 and gaps[1] >= 1.0 - 0.01  # base * 2**(n-1), never early
    errors = fetch(pg_dsn, sql.SQL("SELECT last_error FROM {}").format(jobs(schema)))
    assert all("ValueError: attempt 3 failed" in str(e) and "3 of 3" in str(e) for (e,) in errors)


def test_malformed_payload_is_dead_lettered_and_the_consumer_goes_on(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """Rows from before migration 13 (its CHECK dropped here: such rows get in no more)."""
    insert = sql.SQL("INSERT INTO {} (queue, kind, payload) VALUES (%s, %s, %s::jsonb)").format(jobs(schema))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT jobs_runnable_check").format(jobs(schema)))
    fetch_none = [(queue_name, "k", "[1, 2]"), (queue_name, "", "{}"), (queue_name, "k", '"text"')]
    for params in fetch_none:
        fetch(pg_dsn, insert + sql.SQL(" RETURNING id"), params)
    produce(schema, queue_name, 5)
    proc = run_cli("consumer", *pg_args(queue_name), "--once", "-p", "noop", env=schema_env(schema))
    assert proc.returncode == 0, proc.stderr
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 5, "dead": 3}
    reasons = sorted(str(r) for (r,) in fetch(
        pg_dsn, sql.SQL("SELECT last_error FROM {} WHERE status = 'dead'").format(jobs(schema))))
    assert reasons == ["MalformedJob: kind is empty",
                       "MalformedJob: payload is not a JSON object (got list)",
                       "MalformedJob: payload is not a JSON object (got str)"]


def test_bad_config_and_unreachable_database_exit_with_one_line(tmp_path: Path, schema: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("consumer:\n  concurrency: lots\n")
    result = run_cli("consumer", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"jobq: config error: {bad}:2: consumer.concurrency: "
                                      "expected int, got str 'lots'")
    env = schema_env(schema, JOBQ_PG_DSN="postgresql://jobq:s3cret@127.0.0.1:1/nowhere",
                     JOBQ_CONNECT__ATTEMPTS="2", JOBQ_CONNECT__BACKOFF_BASE="0.1")
    result = run_cli("consumer", *pg_args("q"), "--once", "-p", "noop", env=env)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("jobq: cannot reach PostgreSQL at 127.0.0.1:1 after 2 attempts")
    assert "attempt 1/2" in result.stderr  # each try is logged


def test_sigterm_while_still_connecting_exits_0_at_once(schema: str) -> None:
    env = schema_env(schema, JOBQ_PG_DSN="postgresql://jobq@127.0.0.1:1/nowhere",
                     JOBQ_CONNECT__ATTEMPTS="50", JOBQ_CONNECT__BACKOFF_BASE="0.2")
    proc = start_cli("consumer", *pg_args("q"), "-p", "noop", env=env)
    stderr = Stderr(proc)
    stderr.wait_for("attempt 2/50", 30)  # retrying the unreachable server
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, stderr.text()
    err = stderr.text()
    assert time.monotonic() - started < 3 and "attempt 1/50" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["consumer", "--claim=lease", "-p", "noop"],
                                     ["consumer", "--claim=transaction", "-p", "noop"],
                                     ["producer", "-n", "1"]])
def test_a_schema_never_initialised_exits_2_naming_jobq_init(pg_dsn: str, command: list[str]) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"  # no `jobq init` for this one: nothing is created
    result = run_cli(command[0], *pg_args("q"), *command[1:], env=schema_env(name))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jobq: config error: postgres.schema '{name}' has no ")
    assert "run `jobq init` with the same config first" in last and "Traceback" not in result.stderr
    assert not fetch(pg_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))


def attempt_log(dsn: str, schema: str) -> object:
    """The attempt log table of ``schema`` (migration 2's), or None if there is none."""
    name = sql.Identifier(schema, "attempts").as_string(None)
    return fetch(dsn, "SELECT to_regclass(%s)::text", [name])[0][0]


def test_init_leaves_no_attempt_log_on_a_fresh_or_an_upgraded_schema(pg_dsn: str, schema: str) -> None:
    assert attempt_log(pg_dsn, schema) is None  # fresh: migration 4 drops what 2 created
    old = f"t_{uuid.uuid4().hex[:10]}"  # a schema as `jobq init` of a build with migrations 1-3 left it
    queries = Queries(old)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(old)))
            conn.execute(queries["migrations_table"])
            for m in migrations(old):
                if m.version <= 3:
                    conn.execute(m.statement)
                    conn.execute(queries["migration_record"], {"version": m.version, "title": m.title})
        assert attempt_log(pg_dsn, old) is not None
        upgraded = run_cli("jobq", "init", *pg_args("q"), env=schema_env(old))
        assert upgraded.returncode == 0, upgraded.stderr
        assert attempt_log(pg_dsn, old) is None
        versions = fetch(pg_dsn, sql.SQL("SELECT version FROM {} ORDER BY version").format(
            sql.Identifier(old, "migrations")))
        assert versions == [(m.version,) for m in migrations(old)]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(old)))
