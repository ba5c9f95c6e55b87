"""Rows another SQL client can write (issue 37, docs/wire-format.md): what the schema refuses
(migration 13), what it mends on upgrade, and what the consumer and the admin commands make of
every value it still admits. Each test here failed before migration 13 and the fixes with it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.transports.postgres.sql import migrations
from tests.conftest import fetch, pg_args, run_cli, schema_env
from tests.integration.test_postgres import jobs, produce, status_counts

CLAIMS = ["lease", "transaction"]


def insert(dsn: str, schema: str, columns: Sequence[str], values: Sequence[object],
           *, system_id: bool = False) -> int:
    """One row by raw SQL, as a foreign writer would; its id."""
    statement = sql.SQL("INSERT INTO {} ({}) {} VALUES ({}) RETURNING id").format(
        jobs(schema), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL("OVERRIDING SYSTEM VALUE" if system_id else ""),
        sql.SQL(", ").join(sql.Placeholder() * len(values)))
    ((job_id,),) = fetch(dsn, statement, values)
    return int(str(job_id))


def consume(schema: str, queue: str, claim: str) -> None:
    result = run_cli("consumer", *pg_args(queue), "--once", "-n", "2", "-p", "noop",
                     env=schema_env(schema, JOBQ_POSTGRES__CLAIM=claim), timeout=60)
    assert result.returncode == 0, result.stderr


def admin(schema: str, queue: str, *args: str) -> str:
    result = run_cli("jobq", *args, *pg_args(queue), env=schema_env(schema), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("column", "value"), [
    ("created_at", "infinity"), ("created_at", "-infinity"), ("created_at", "20000-01-01"),
    ("run_at", "infinity"), ("run_at", "-infinity"), ("run_at", "0044-03-15 BC"),
    ("finished_at", "infinity"), ("attempts", -1), ("priority", -1), ("priority", 10),
    ("kind", ""), ("kind", "k" * 201), ("payload", "[1]"), ("payload", "null"), ("headers", '"h"'),
])
def test_the_schema_refuses_what_no_consumer_can_run_or_show(
        pg_dsn: str, schema: str, queue_name: str, column: str, value: object) -> None:
    """Before migration 13 each of these went in; a time Python cannot hold then failed the
    claim of the whole batch and every `jobq jobs list` of the queue."""
    row = {"queue": queue_name, "kind": "k", "payload": "{}", column: value}
    with pytest.raises(psycopg.errors.CheckViolation):
        insert(pg_dsn, schema, list(row), list(row.values()))
    assert status_counts(pg_dsn, schema, queue_name) == {}


def test_a_running_row_without_a_lease_is_refused(pg_dsn: str, schema: str, queue_name: str) -> None:
    """No rescue would ever free it: it stayed running for ever."""
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_lease_check"):
        insert(pg_dsn, schema, ["queue", "kind", "payload", "status"],
               [queue_name, "k", "{}", "running"])


@pytest.mark.parametrize("claim", CLAIMS)
def test_attempts_at_the_integers_top_stop_no_claim(
        pg_dsn: str, schema: str, queue_name: str, claim: str) -> None:
    """attempts = 2^31-1 overflowed the claim's count: no claim of the queue went through and
    `consumer --once` hung. It is a job whose attempts are used up: dead unrun (lease mode
    runs it once when max_attempts is as large: not over it)."""
    produce(schema, queue_name, 3)
    spent = insert(pg_dsn, schema, ["queue", "kind", "payload", "attempts", "max_attempts"],
                   [queue_name, "k", "{}", 2**31 - 1, 5])
    produce(schema, queue_name, 3)
    consume(schema, queue_name, claim)
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 6, "dead": 1}
    ((error,),) = fetch(pg_dsn, sql.SQL("SELECT last_error FROM {} WHERE id = %s").format(
        jobs(schema)), [spent])
    assert "is over max_attempts 5" in str(error)


@pytest.mark.parametrize("claim", CLAIMS)
def test_attempts_over_max_attempts_end_dead_unrun_in_both_claim_modes_as_on_rabbitmq(
        pg_dsn: str, schema: str, queue_name: str, claim: str, tmp_path: Path) -> None:
    """Lease mode ran such a job, transaction mode dead-lettered it blaming crashes of its
    consumer, RabbitMQ dead-letters it for its attempt header: now one rule, one reason."""
    spent = insert(pg_dsn, schema, ["queue", "kind", "payload", "attempts", "max_attempts"],
                   [queue_name, "k", "{}", 7, 3])
    consume(schema, queue_name, claim)
    ((status, error),) = fetch(pg_dsn, sql.SQL(
        "SELECT status, last_error FROM {} WHERE id = %s").format(jobs(schema)), [spent])
    assert (status, error) == (
        "dead", "attempt 8 is over max_attempts 3 (column attempts: 7 used before this run)")


def test_a_pending_row_marked_far_ahead_by_another_writer_runs_in_transaction_mode(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """A pending row's locked_until is a transaction-mode pick's mark for 2 s; one a day ahead
    kept the job from every pick for that day (lease mode ran it at once)."""
    job = insert(pg_dsn, schema, ["queue", "kind", "payload", "locked_until", "locked_by"],
                 [queue_name, "k", "{}", "9999-01-01", "someone"])
    consume(schema, queue_name, "transaction")
    ((status, attempts),) = fetch(pg_dsn, sql.SQL(
        "SELECT status, attempts FROM {} WHERE id = %s").format(jobs(schema)), [job])
    assert (status, attempts) == ("done", 1)


def test_a_job_with_an_id_below_one_is_shown_cancelled_and_listed(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """Ids are a bigint: another writer can insert -7 or 0, and `jobq jobs show -7` said
    "not a job id"."""
    for job_id in (-7, 0):
        insert(pg_dsn, schema, ["id", "queue", "kind", "payload"],
               [job_id, queue_name, "k", "{}"], system_id=True)
    assert json.loads(admin(schema, queue_name, "jobs", "show", "-7", "--json"))["id"] == -7
    assert "cancelled" in admin(schema, queue_name, "jobs", "cancel", "0")
    listed = json.loads(admin(schema, queue_name, "jobs", "list", "--json"))
    assert [row["id"] for row in listed] == [-7]


def test_requeue_names_a_dead_job_that_could_never_run_and_requeues_the_rest(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """A dead row may hold anything (a record); moved back to pending it would break the
    runnable rule, and one such row failed the requeue of all of them."""
    bad = insert(pg_dsn, schema, ["queue", "kind", "payload", "status"],
                 [queue_name, "k", "[1]", "dead"])
    good = insert(pg_dsn, schema, ["queue", "kind", "payload", "status"],
                  [queue_name, "k", "{}", "dead"])
    refused = run_cli("jobq", "jobs", "retry", str(bad), *pg_args(queue_name),
                      env=schema_env(schema), timeout=60)
    assert refused.returncode == 2
    assert (f"job {bad} cannot run again: its payload is not a JSON object (got array)"
            in refused.stderr)
    assert admin(schema, queue_name, "dead", "requeue", "--all").strip() == (
        f"requeued 1 dead jobs: {good}")
    assert status_counts(pg_dsn, schema, queue_name) == {"pending": 1, "dead": 1}


def test_migration_13_mends_the_rows_of_an_existing_table_and_keeps_their_meaning(
        pg_dsn: str, queue_name: str) -> None:
    """An upgrade of a table holding every kind of row the new rules refuse: init applies the
    migration, and then each row runs, waits, or is dead with its reason, as documented."""
    schema = f"t_m13_{queue_name[2:]}"
    table = sql.Identifier(schema, "jobs")
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("CREATE TABLE {} (version integer PRIMARY KEY, title text "
                                 "NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
                         .format(sql.Identifier(schema, "migrations")))
            for m in migrations(schema):
                if m.version < 13:
                    conn.execute(m.statement)
                    conn.execute(sql.SQL("INSERT INTO {} (version, title) VALUES (%s, %s)").format(
                        sql.Identifier(schema, "migrations")), [m.version, m.title])
            rows = {  # name: an old row's columns beside queue, as SQL literals
                "due": {"run_at": "'-infinity'", "created_at": "'infinity'"},
                "never": {"run_at": "'infinity'"},
                "negative": {"attempts": "-4", "priority": "40"},
                "lost": {"status": "'running'"},
                "list": {"payload": "'[1]'"},
                "empty": {"kind": "''"},
            }
            ids = {}
            for name, columns in rows.items():
                row = {"kind": "'k'", "payload": "'{}'", **columns}
                cur = conn.execute(sql.SQL("INSERT INTO {} (queue, {}) VALUES (%s, {}) RETURNING id")
                                   .format(table, sql.SQL(", ").join(map(sql.Identifier, row)),
                                           sql.SQL(", ").join(map(sql.SQL, row.values()))),
                                   [queue_name])
                ids[name] = cur.fetchone()[0]  # type: ignore[index]
        init = run_cli("jobq", "init", *pg_args(queue_name), env=schema_env(schema), timeout=60)
        assert init.returncode == 0, init.stderr
        assert "applied migration 13" in init.stdout
        result = run_cli("consumer", *pg_args(queue_name), "--once", "-p", "noop",
                         env=schema_env(schema), timeout=60)
        assert result.returncode == 0, result.stderr
        state = {name: fetch(pg_dsn, sql.SQL(
            "SELECT status, attempts, priority, isfinite(run_at), last_error FROM {} "
            "WHERE id = %s").format(table), [job_id])[0] for name, job_id in ids.items()}
        assert state["due"][:2] == ("done", 1)
        assert state["never"][:2] == ("pending", 0)  # 9999-12-30: still never due
        assert state["negative"][:3] == ("done", 1, 9)
        # Given a lease that had expired, it was freed by the consumer's rescue (and run, or
        # waiting to run alone: --once may end first).
        assert state["lost"][0] in ("done", "pending"), state["lost"]
        assert state["list"][0] == "dead" and "payload is not a JSON object (got array)" in str(
            state["list"][4])
        assert state["empty"][0] == "dead" and "kind is empty" in str(state["empty"][4])
        for status in ("pending", "running", "dead", "done"):
            admin(schema, queue_name, "jobs", "list", "--state", status)
        for job_id in ids.values():
            admin(schema, queue_name, "jobs", "show", str(job_id))
        admin(schema, queue_name, "stats")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
