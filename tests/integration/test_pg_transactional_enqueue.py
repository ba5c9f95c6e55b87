"""Enqueue inside the caller's own transaction (issue 15): the job exists iff it commits.

Before: PostgresPublisher always took a connection of its own pool, so the README's "enqueue in
the same transaction as your writes" held only for a hand-written INSERT.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import sql

from jobq import TransactionRequired
from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.core.errors import QueueFull
from jobq.core.port import NewJob
from jobq.transports.postgres import enqueue_sync
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.publisher import PostgresPublisher
from tests.conftest import fetch, jobs_table, pg_args, run_cli, schema_env


def rows(dsn: str, schema: str) -> list[tuple[object, ...]]:
    return fetch(dsn, sql.SQL("SELECT kind, status, payload FROM {} ORDER BY id").format(jobs_table(schema)))




async def test_a_rolled_back_enqueue_never_exists_and_a_committed_one_runs(
        pg_dsn: str, schema: str, queue_name: str, pg_publisher: PostgresPublisher) -> None:
    orders = sql.SQL("{}.orders").format(sql.Identifier(schema))
    with psycopg.connect(pg_dsn, autocommit=True) as setup:
        setup.execute(sql.SQL("CREATE TABLE {} (n int)").format(orders))
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(orders))
                await pg_publisher.enqueue(NewJob(kind="receipt", payload={"order": 1}), connection=conn)
                raise RuntimeError("the order fails: its job goes with it")
        async with conn.transaction():
            await conn.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(orders))
            ids = await pg_publisher.enqueue_many(
                [NewJob(kind="receipt", payload={"order": 2}), NewJob(kind="audit")], connection=conn)
            assert rows(pg_dsn, schema) == []  # not visible before the COMMIT
    assert len(ids) == 2
    assert fetch(pg_dsn, sql.SQL("SELECT n FROM {}").format(orders)) == [(2,)]
    assert rows(pg_dsn, schema) == [("receipt", "pending", {"order": 2}), ("audit", "pending", {})]

    ran = run_cli("consumer", *pg_args(queue_name), "-p", "noop", "--once", env=schema_env(schema))
    assert ran.returncode == 0, ran.stderr
    assert [status for _, status, _ in rows(pg_dsn, schema)] == ["done", "done"]


async def test_a_connection_outside_a_transaction_is_refused_and_nothing_is_enqueued(
        pg_dsn: str, schema: str, pg_publisher: PostgresPublisher) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as auto:
        with pytest.raises(TransactionRequired, match="not in a transaction"):
            await pg_publisher.enqueue(NewJob(kind="k"), connection=auto)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as idle:  # nothing begun yet
        with pytest.raises(TransactionRequired, match=r"conn\.transaction"):
            await pg_publisher.enqueue(NewJob(kind="k"), connection=idle)
        with pytest.raises(psycopg.errors.DivisionByZero):
            await idle.execute("SELECT 1/0")
        with pytest.raises(TransactionRequired, match="failed transaction"):
            await pg_publisher.enqueue(NewJob(kind="k"), connection=idle)
    with pytest.raises(TypeError, match="enqueue_sync"), psycopg.connect(pg_dsn) as sync_conn:
        await pg_publisher.enqueue(NewJob(kind="k"), connection=sync_conn)
    assert rows(pg_dsn, schema) == []


async def test_a_full_queue_refuses_at_once_inside_a_transaction(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    pool = await open_pool(pg_dsn, ConnectConfig(), 1, logging.getLogger("jobq.test"),
                           network_timeout=5.0)
    bounded = PostgresPublisher(pool, PostgresConfig(dsn=pg_dsn, schema=schema), queue=queue_name,
                                max_attempts=3, limits=LimitsConfig(max_pending=2))
    try:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn, conn.transaction():
            with pytest.raises(QueueFull, match="does not wait") as full:
                await bounded.enqueue_many([NewJob(kind="k")] * 3, connection=conn)
        assert len(full.value.accepted) == 2  # they commit with the caller's transaction
        assert len(rows(pg_dsn, schema)) == 2
    finally:
        await pool.close()


def test_enqueue_sync_commits_and_rolls_back_with_the_callers_transaction(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            enqueue_sync(conn, NewJob(kind="gone"), queue=queue_name, schema=schema)
            raise RuntimeError("rolled back")
        with conn.transaction():
            job_id = enqueue_sync(conn, NewJob(kind="kept", payload={"a": 1}), queue=queue_name,
                                  schema=schema, max_attempts=7)
    query = sql.SQL("SELECT id::text, kind, max_attempts FROM {}").format(jobs_table(schema))
    assert fetch(pg_dsn, query) == [(job_id, "kept", 7)]
    with psycopg.connect(pg_dsn, autocommit=True) as auto, pytest.raises(TransactionRequired):
        enqueue_sync(auto, NewJob(kind="k"), queue=queue_name, schema=schema)


def test_follow_ups_through_job_context_commit_with_the_ack_and_vanish_with_a_failure(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    env = schema_env(schema, JOBQ_POSTGRES__CLAIM="transaction")
    produce = run_cli("producer", *pg_args(queue_name), "--count", "1", "--kind", "parent", env=env)
    assert produce.returncode == 0, produce.stderr
    produce = run_cli("producer", *pg_args(queue_name), "--count", "1", "--kind", "doomed", env=env)
    assert produce.returncode == 0, produce.stderr
    (ok,), (bad,) = fetch(pg_dsn, sql.SQL("SELECT id::text FROM {} ORDER BY id").format(jobs_table(schema)))

    ran = run_cli("consumer", *pg_args(queue_name), "-p", "tests.processors:follow_up", "--once",
                  env=env)
    assert ran.returncode == 0, ran.stderr
    children = sql.SQL("SELECT payload->>'of', status FROM {} WHERE kind = 'child'").format(
        jobs_table(schema))
    # The failed parent's child was rolled back with it. The other one is pending: --once in
    # transaction mode sweeps the jobs due when it started, and the child came after.
    assert fetch(pg_dsn, children) == [(ok, "pending")]
    ran = run_cli("consumer", *pg_args(queue_name), "-p", "tests.processors:follow_up", "--once",
                  env=env)
    assert ran.returncode == 0, ran.stderr
    assert fetch(pg_dsn, children) == [(ok, "done")]
    assert fetch(pg_dsn, sql.SQL("SELECT status FROM {} WHERE id = %s").format(jobs_table(schema)),
                 (int(str(bad)),)) == [("dead",)]
