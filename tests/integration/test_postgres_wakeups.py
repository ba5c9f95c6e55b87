"""Postgres: NOTIFY wake-ups, poll-only mode, heartbeats, connection loss, schema and API."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob
from jobq.transports.postgres.sql import migrations
from tests.conftest import (
    ROOT,
    consuming,
    fetch,
    pg_args,
    run_cli,
    schema_env,
    start_cli,
    wait_until,
)
from tests.integration.test_postgres import RECORD, produce, status_counts
from tests.processors import completions


def test_one_notification_per_insert_statement(pg_dsn: str, schema: str, queue_name: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{schema}.jobs")))
        produce(schema, queue_name, 1000, "--batch", "1000")
        notes = list(conn.notifies(timeout=1.0))
    assert [n.payload for n in notes] == [queue_name]


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_idle_consumer_is_woken_by_notify_not_by_polling(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path, claim: str) -> None:
    env = schema_env(schema, JOBQ_POSTGRES__POLL_INTERVAL="30")
    proc = start_cli("consumer", *pg_args(queue_name), f"--claim={claim}", "-p", RECORD,
                     "-a", f"directory={tmp_path}", env=env)
    consuming(proc)  # idle, asleep on LISTEN
    try:
        for done in (3, 6):  # the second time, after a sweep that found jobs has run dry
            started = time.monotonic()
            produce(schema, queue_name, 3)
            assert wait_until(lambda n=done: len(completions(tmp_path)) == n, 10, step=0.02)
            assert time.monotonic() - started < 5  # far sooner than the 30 s poll
            time.sleep(0.5)
        idle = cpu_seconds(proc.pid)
        time.sleep(2.0)
        assert cpu_seconds(proc.pid) - idle < 0.3  # asleep on LISTEN, not claiming in a loop
    finally:
        proc.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        proc.wait(timeout=30)
    assert time.monotonic() - stopping < 5  # an idle consumer stops at once


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_poll_only_mode_still_finds_work(pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    env = schema_env(schema, JOBQ_POSTGRES__NOTIFY="false", JOBQ_POSTGRES__POLL_INTERVAL="0.2")
    proc = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                     env=env)
    err = consuming(proc)
    try:
        produce(schema, queue_name, 5)
        assert wait_until(lambda: len(completions(tmp_path)) == 5, 10)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, err.text()


def test_heartbeat_keeps_a_long_job_from_being_rescued(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 1)
    env = schema_env(schema, JOBQ_POSTGRES__LEASE="1", JOBQ_POSTGRES__RESCUE_INTERVAL="0.2")
    slow = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                     "-a", "sleep_ms=3000", env=env)
    assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name).get("running") == 1, 10)
    other = run_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                    "--once", env=env)  # starts by rescuing expired leases: there must be none
    time.sleep(2.0)
    assert other.returncode == 0 and "rescued" not in other.stderr
    assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"done": 1}, 10)
    slow.send_signal(signal.SIGTERM)
    slow.communicate(timeout=30)
    assert completions(tmp_path) == ["1"] or len(completions(tmp_path)) == 1


def test_connection_loss_mid_run_loses_nothing(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 2000)
    # Every connection of this consumer (pool and LISTEN) carries the schema's name as its
    # application_name: the cut below finds them whatever they last ran (a backend's last
    # query, matched on the schema name, may be a reconnect's bare check).
    env = schema_env(schema, JOBQ_CONNECT__BACKOFF_BASE="0.1", JOBQ_POSTGRES__LEASE="3",
                     JOBQ_POSTGRES__RESCUE_INTERVAL="0.5",
                     JOBQ_PG_DSN=f"{pg_dsn}?application_name={schema}")
    proc = start_cli("consumer", *pg_args(queue_name), "-p", RECORD, "-a", f"directory={tmp_path}",
                     "-a", "sleep_ms=5", "-n", "16", env=env)
    kill = sql.SQL("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                   "WHERE pid <> pg_backend_pid() AND application_name = %s")
    try:
        for round_ in range(3):
            floor = 100 + round_ * 300
            assert wait_until(lambda floor=floor: len(completions(tmp_path)) > floor, 30)  # type: ignore[misc]
            # the consumer's connections were really cut (after a cut they come back with backoff)
            assert wait_until(lambda: fetch(pg_dsn, kill, [schema])[0][0] >= 1, 10)  # type: ignore[index, operator]
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"done": 2000}, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert len(set(completions(tmp_path))) == 2000  # none lost (a few may have run twice)


def test_init_is_idempotent_and_print_sql_shows_the_migrations(pg_dsn: str, schema: str) -> None:
    again = run_cli("jobq", "init", *pg_args("q"), env=schema_env(schema))
    assert again.returncode == 0 and "up to date" in again.stdout
    shown = run_cli("jobq", "init", "--print-sql", *pg_args("q"), env=schema_env(schema))
    assert shown.returncode == 0
    assert f'CREATE TABLE IF NOT EXISTS "{schema}"."jobs"' in shown.stdout
    versions = fetch(pg_dsn, sql.SQL("SELECT version FROM {}").format(sql.Identifier(schema, "migrations")))
    assert versions == [(m.version,) for m in migrations(schema)] and len(versions) >= 1


def test_python_api_enqueues_one_and_many(pg_dsn: str, schema: str, queue_name: str) -> None:
    settings = load_settings(ROOT / "configs" / "postgres.yaml",
                             {"postgres.schema": schema, "queue": queue_name, "postgres.dsn": pg_dsn})

    async def go() -> list[str]:
        async with connect_publisher(settings) as publisher:
            one = await publisher.enqueue(NewJob(kind="email", payload={"to": "a@example.com"}))
            many = await publisher.enqueue_many([NewJob(kind="hook", payload={"n": i}, delay=60)
                                                 for i in range(3)])
            return [one, *many]

    ids = asyncio.run(go())
    rows = fetch(pg_dsn, sql.SQL("SELECT id::text, kind, payload, run_at > now() FROM {} ORDER BY id")
                 .format(sql.Identifier(schema, "jobs")))
    assert [r[0] for r in rows] == ids
    assert rows[0][1:] == ("email", {"to": "a@example.com"}, False)
    assert all(r[1] == "hook" and r[3] for r in rows[1:])  # delayed jobs are not due yet
