"""PostgreSQL under network faults, through the fault proxy: a partition longer than the lease,
a stall during shutdown, a reset mid ack batch, a server turned read-only, a publisher whose
backends are terminated. The real server is never reconfigured: only a scratch database is."""

from __future__ import annotations

import asyncio
import collections
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.core.errors import OutcomeUnknown
from jobq.core.port import NewJob
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.publisher import PostgresPublisher
from tests.conftest import (
    cli_env,
    command,
    fetch,
    pg_args,
    run_cli,
    schema_env,
    stop_cli,
    via_proxy,
    wait_until,
)
from tests.faultproxy import FaultProxy
from tests.processors import completions

RECORD = "tests.processors:record"
NETWORK = 1.0  # postgres.network_timeout in these tests
GRACE = 1.0  # connect.CANCEL_GRACE
DETECT = NETWORK + GRACE + 1.5  # the statement deadline, its grace, and a slow machine's slack


def jobs(schema: str) -> sql.Composed:
    return sql.SQL("{}").format(sql.Identifier(schema, "jobs"))


def counts(dsn: str, schema: str, queue: str) -> dict[str, int]:
    q = sql.SQL("SELECT status, count(*) FROM {} WHERE queue = %s GROUP BY status").format(jobs(schema))
    return {str(s): int(n) for s, n in fetch(dsn, q, [queue])}  # type: ignore[call-overload]


def produce(env: dict[str, str], queue: str, count: int) -> None:
    result = run_cli("producer", *pg_args(queue), "--count", str(count), env=env)
    assert result.returncode == 0, result.stderr


def consumer(env: dict[str, str], queue: str, directory: Path, log: Path, *extra: str
             ) -> subprocess.Popen[str]:
    """A consumer CLI whose stderr goes to ``log`` (read while it runs)."""
    return subprocess.Popen(
        [command("consumer"), *pg_args(queue), "-p", RECORD, "-a", f"directory={directory}", *extra],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True, env=env)


def faulty_env(schema: str, dsn: str, **extra: str) -> dict[str, str]:
    return schema_env(schema, JOBQ_PG_DSN=dsn, JOBQ_POSTGRES__NETWORK_TIMEOUT=str(NETWORK),
                      JOBQ_POSTGRES__RESCUE_INTERVAL="0.5", JOBQ_POSTGRES__POLL_INTERVAL="0.2",
                      JOBQ_CONNECT__BACKOFF_BASE="0.1", JOBQ_CONNECT__BACKOFF_MAX="0.5",
                      JOBQ_CONNECT__TIMEOUT="1", **extra)



def test_partition_longer_than_the_lease_is_noticed_and_ridden_out(
        pg_dsn: str, schema: str, queue_name: str, pg_proxy: FaultProxy, tmp_path: Path) -> None:
    env = faulty_env(schema, via_proxy(pg_dsn, pg_proxy), JOBQ_POSTGRES__LEASE="3")
    produce(schema_env(schema), queue_name, 200)
    log = tmp_path / "consumer.err"
    proc = consumer(env, queue_name, tmp_path / "done", log, "-a", "sleep_ms=30", "-n", "4")
    try:
        assert wait_until(lambda: len(completions(tmp_path / "done")) >= 20, 30), log.read_text()
        pg_proxy.stall()
        stalled = time.monotonic()
        assert wait_until(lambda: "no answer from PostgreSQL within 1s" in log.read_text(), DETECT), \
            log.read_text()
        noticed = time.monotonic() - stalled
        time.sleep(max(0.0, 4 - noticed))  # longer than the 3 s lease
        pg_proxy.heal()
        assert wait_until(lambda: counts(pg_dsn, schema, queue_name) == {"done": 200}, 40), \
            (counts(pg_dsn, schema, queue_name), log.read_text()[-3000:])
    finally:
        pg_proxy.heal()
        elapsed = stop_cli(proc, 20)
    assert proc.returncode == 0, log.read_text()
    assert noticed <= DETECT
    done = collections.Counter(completions(tmp_path / "done"))
    assert len(done) == 200  # nothing lost (a job whose lease expired may have run twice)
    assert elapsed < 10


def test_stall_during_shutdown_ends_within_the_stated_bound(
        pg_dsn: str, schema: str, queue_name: str, pg_proxy: FaultProxy, tmp_path: Path) -> None:
    shutdown_timeout = 2.0
    env = faulty_env(schema, via_proxy(pg_dsn, pg_proxy), JOBQ_POSTGRES__LEASE="5",
                     JOBQ_CONSUMER__SHUTDOWN_TIMEOUT=str(shutdown_timeout), JOBQ_CONSUMER__BUFFER="0")
    produce(schema_env(schema), queue_name, 100)
    log = tmp_path / "consumer.err"
    proc = consumer(env, queue_name, tmp_path / "done", log, "-a", "sleep_ms=300", "-n", "4")
    try:
        assert wait_until(lambda: len(completions(tmp_path / "done")) >= 8, 30), log.read_text()
        pg_proxy.stall()  # acks, claims and the stop's writes go into the black hole
        elapsed = stop_cli(proc, 60)
    finally:
        pg_proxy.heal()
    # The stated bound (docs/architecture.md, Faults): shutdown_timeout, then the ack flush's
    # statement deadline (network_timeout + 1 s), the pool's close (5 s) and slack.
    assert elapsed < shutdown_timeout + (NETWORK + GRACE) * 2 + 5 + 2, (elapsed, log.read_text())
    assert proc.returncode == 0, log.read_text()
    # Nothing lost: what it did not ack runs again in another consumer once the leases expire.
    rescuer = consumer(faulty_env(schema, pg_dsn, JOBQ_POSTGRES__LEASE="5"), queue_name,
                       tmp_path / "done", tmp_path / "rescuer.err", "-n", "32")
    try:
        assert wait_until(lambda: counts(pg_dsn, schema, queue_name) == {"done": 100}, 40), \
            counts(pg_dsn, schema, queue_name)
    finally:
        stop_cli(rescuer, 20)
    assert len(set(completions(tmp_path / "done"))) == 100


def test_reset_in_the_middle_of_ack_batches_loses_nothing(
        pg_dsn: str, schema: str, queue_name: str, pg_proxy: FaultProxy, tmp_path: Path) -> None:
    env = faulty_env(schema, via_proxy(pg_dsn, pg_proxy), JOBQ_POSTGRES__LEASE="3",
                     JOBQ_POSTGRES__ACK_INTERVAL="0.3")  # acks wait in the batch for 0.3 s
    produce(schema_env(schema), queue_name, 600)
    log = tmp_path / "consumer.err"
    proc = consumer(env, queue_name, tmp_path / "done", log, "-a", "sleep_ms=5", "-n", "8")
    resets = 0
    try:
        for round_ in range(4):
            goal = 60 * (round_ + 1)
            assert wait_until(lambda goal=goal: len(completions(tmp_path / "done")) >= goal, 30)
            time.sleep(0.15)  # inside the ack interval: the batch holds unwritten acks
            resets += pg_proxy.reset() > 0
        assert wait_until(lambda: counts(pg_dsn, schema, queue_name) == {"done": 600}, 40), \
            (counts(pg_dsn, schema, queue_name), log.read_text()[-3000:])
    finally:
        elapsed = stop_cli(proc, 20)
    assert resets == 4 and proc.returncode == 0, log.read_text()
    assert len(set(completions(tmp_path / "done"))) == 600  # duplicates allowed, no loss
    assert elapsed < 10


@pytest.fixture
def scratch_db(pg_dsn: str) -> Iterator[str]:
    """A database of its own, dropped afterwards (its settings are the test's to change)."""
    name = f"jobq_ro_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_read_only_server_is_a_lost_connection_until_writable_again(
        pg_dsn: str, scratch_db: str, queue_name: str, pg_proxy: FaultProxy, tmp_path: Path) -> None:
    direct = psycopg.conninfo.make_conninfo(pg_dsn, dbname=scratch_db)
    writer = psycopg.conninfo.make_conninfo(direct, options="-c default_transaction_read_only=off")
    init = run_cli("jobq", "init", *pg_args(queue_name), env=cli_env(JOBQ_PG_DSN=direct))
    assert init.returncode == 0, init.stderr
    env = faulty_env("jobq", via_proxy(pg_dsn, pg_proxy, dbname=scratch_db), JOBQ_POSTGRES__LEASE="3")
    produce(cli_env(JOBQ_PG_DSN=direct), queue_name, 20)
    log = tmp_path / "consumer.err"
    proc = consumer(env, queue_name, tmp_path / "done", log, "-n", "4")
    database = sql.Identifier(scratch_db)
    try:
        assert wait_until(lambda: counts(direct, "jobq", queue_name) == {"done": 20}, 30), log.read_text()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as after a failover to a standby
            conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on")
                         .format(database))
        pg_proxy.reset()  # the consumer's new sessions are read-only
        produce(cli_env(JOBQ_PG_DSN=writer), queue_name, 20)
        assert wait_until(lambda: "read-only transaction" in log.read_text(), 10), log.read_text()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(database))
        assert wait_until(lambda: counts(direct, "jobq", queue_name) == {"done": 40}, 20), \
            (counts(direct, "jobq", queue_name), log.read_text()[-3000:])
    finally:
        elapsed = stop_cli(proc, 20)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "receive failed (ConnectionLost: postgres claim: cannot execute UPDATE in a read-only " \
           "transaction)" in text
    assert len(set(completions(tmp_path / "done"))) == 40
    assert elapsed < 10


async def test_publisher_under_terminated_backends_loses_nothing(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    app = f"pub-{uuid.uuid4().hex[:8]}"
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, application_name=app)
    pool = await open_pool(dsn, ConnectConfig(backoff_base=0.05, backoff_max=0.5), 2,
                           logging.getLogger("jobq.test"), network_timeout=NETWORK)
    publisher = PostgresPublisher(pool, PostgresConfig(dsn=dsn, schema=schema), queue=queue_name,
                                  max_attempts=3, limits=LimitsConfig(enqueue_timeout=5))
    stop_cutting = asyncio.Event()
    cuts = 0

    async def cut() -> None:  # pg_terminate_backend on the publisher's backends, 5 times a second
        nonlocal cuts
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            while not stop_cutting.is_set():
                cur = await conn.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                                         "FROM pg_stat_activity WHERE application_name = %s", [app])
                cuts += int((await cur.fetchone() or [0])[0])
                await asyncio.sleep(0.2)

    returned: list[str] = []
    maybe: list[str] = []
    cutter = asyncio.create_task(cut())
    try:
        await publisher.open()
        for n in range(60):
            try:
                returned += await publisher.enqueue_many(
                    [NewJob(kind="k", payload={"n": n, "i": i}) for i in range(25)])
            except OutcomeUnknown as exc:  # the only error allowed: it says the jobs may be in
                maybe += exc.maybe
            await asyncio.sleep(0.02)
    finally:
        stop_cutting.set()
        await cutter
        await pool.close()
    assert cuts >= 5  # the backends were cut, many times
    stored = [str(row[0]) for row in fetch(
        pg_dsn, sql.SQL("SELECT id FROM {} WHERE queue = %s").format(jobs(schema)), [queue_name])]
    assert len(stored) == len(set(stored))
    assert set(returned) <= set(stored)  # every id handed back is in the table
    assert set(stored) <= set(returned) | set(maybe)  # and nothing else went in unreported
    assert len(returned) + len(maybe) == 60 * 25  # every call ended: enqueued, or said it may be
