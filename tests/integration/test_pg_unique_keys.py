"""Unique keys on Postgres (issue 15): a key held by a pending or running job is not enqueued again.

Before: NewJob had no id or key field, and nothing deduplicated an enqueue.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from psycopg import sql

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.core.errors import ConfigError, MalformedJob
from jobq.core.port import NewJob
from jobq.transports.postgres import enqueue_sync
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.publisher import PostgresPublisher
from tests.conftest import fetch, jobs_table, pg_args, run_cli, schema_env, start_cli, stop_cli, wait_until


def keyed_rows(dsn: str, schema: str) -> list[tuple[object, ...]]:
    return fetch(dsn, sql.SQL("SELECT id::text, key, status FROM {} ORDER BY id").format(jobs_table(schema)))




async def test_a_taken_key_returns_the_existing_job_until_it_is_done(
        pg_dsn: str, schema: str, queue_name: str, pg_publisher: PostgresPublisher) -> None:
    first = await pg_publisher.enqueue(NewJob(kind="report", key="report:42"))
    again = await pg_publisher.enqueue(NewJob(kind="report", key="report:42", payload={"x": 1}))
    assert again == first
    ids = await pg_publisher.enqueue_many([NewJob(kind="k", key="a"), NewJob(kind="k"),
                                        NewJob(kind="k", key="a"), NewJob(kind="k", key="report:42"),
                                        NewJob(kind="k")])
    assert ids[0] == ids[2] and ids[3] == first and len(set(ids)) == 4
    assert len(keyed_rows(pg_dsn, schema)) == 4  # report:42, a, and the two without a key

    ran = run_cli("consumer", *pg_args(queue_name), "-p", "noop", "--once", env=schema_env(schema))
    assert ran.returncode == 0, ran.stderr
    fresh = await pg_publisher.enqueue(NewJob(kind="report", key="report:42"))  # done frees the key
    assert fresh != first
    assert [status for job_id, _, status in keyed_rows(pg_dsn, schema) if job_id == fresh] == ["pending"]


async def test_concurrent_producers_of_the_same_keys_enqueue_each_once(
        pg_dsn: str, schema: str, pg_publisher: PostgresPublisher) -> None:
    keys = [f"order:{n}" for n in range(50)]

    async def produce(offset: int) -> list[str]:
        mine = keys[offset:] + keys[:offset]  # each producer in another order
        got = await pg_publisher.enqueue_many([NewJob(kind="k", key=key) for key in mine])
        return [got[mine.index(key)] for key in keys]

    results = await asyncio.gather(*(produce(offset) for offset in (0, 13, 25, 37)))
    assert all(result == results[0] for result in results)
    rows = keyed_rows(pg_dsn, schema)
    assert sorted(str(key) for _, key, _ in rows) == sorted(keys)


async def test_a_rolled_back_keyed_enqueue_frees_its_key(
        pg_dsn: str, schema: str, queue_name: str, pg_publisher: PostgresPublisher) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await pg_publisher.enqueue(NewJob(kind="k", key="once"), connection=conn)
                raise RuntimeError("rolled back")
    kept = await pg_publisher.enqueue(NewJob(kind="k", key="once"))
    with psycopg.connect(pg_dsn) as conn, conn.transaction():
        assert enqueue_sync(conn, NewJob(kind="k", key="once"), queue=queue_name, schema=schema) == kept
    assert [key for _, key, _ in keyed_rows(pg_dsn, schema)] == ["once"]


async def test_bad_keys_and_keys_with_a_cap_are_refused_before_anything_is_enqueued(
        pg_dsn: str, schema: str, queue_name: str, pg_publisher: PostgresPublisher) -> None:
    for key, problem in (("", "non-empty"), ("x" * 256, "at most 255"), ("a\nb", "printable")):
        with pytest.raises(MalformedJob, match=problem):
            await pg_publisher.enqueue_many([NewJob(kind="k", key="fine"), NewJob(kind="k", key=key)])
    pool = await open_pool(pg_dsn, ConnectConfig(), 1, logging.getLogger("jobq.test"),
                           network_timeout=5.0)
    capped = PostgresPublisher(pool, PostgresConfig(dsn=pg_dsn, schema=schema), queue=queue_name,
                               max_attempts=3, limits=LimitsConfig(max_pending=10))
    try:
        with pytest.raises(ConfigError, match="max_pending") as refused:
            await capped.enqueue(NewJob(kind="k", key="fine"))
        assert refused.value.key == "limits.max_pending"
    finally:
        await pool.close()
    assert keyed_rows(pg_dsn, schema) == []


async def test_a_key_held_by_a_running_transaction_mode_job_returns_it_without_waiting(
        pg_dsn: str, schema: str, queue_name: str, pg_publisher: PostgresPublisher) -> None:
    # Transaction mode marks a job done in the open transaction that runs it: an insert of its
    # key waited on the unique index for that transaction, the whole run (then inserted a
    # second job). The look-up first sees it pending and returns its id at once.
    running = await pg_publisher.enqueue(NewJob(kind="slow", key="nightly"))
    env = schema_env(schema, JOBQ_POSTGRES__CLAIM="transaction")
    consumer = start_cli("consumer", *pg_args(queue_name), "-p", "sleep", "-a", "ms=4000", "--once",
                         env=env)
    try:
        taken = sql.SQL("SELECT 1 FROM {} WHERE status = 'pending' AND locked_by IS NOT NULL"
                        ).format(jobs_table(schema))  # picked: its take is one round trip later
        assert wait_until(lambda: fetch(pg_dsn, taken), 15), "the job never started"
        loop = asyncio.get_running_loop()
        started = loop.time()
        again = await pg_publisher.enqueue(NewJob(kind="slow", key="nightly"), timeout=10)
        waited = loop.time() - started
    finally:
        stop_cli(consumer, 30)
    assert again == running and waited < 1.0, waited
    assert len(keyed_rows(pg_dsn, schema)) == 1


def test_a_requeued_dead_job_gives_up_its_key(pg_dsn: str, schema: str, queue_name: str) -> None:
    with psycopg.connect(pg_dsn) as conn, conn.transaction():
        dead = enqueue_sync(conn, NewJob(kind="k", key="k1", max_attempts=1), queue=queue_name,
                            schema=schema)
    env = schema_env(schema)
    ran = run_cli("consumer", *pg_args(queue_name), "-p", "fail", "--once", env=env)
    assert ran.returncode == 0, ran.stderr
    with psycopg.connect(pg_dsn) as conn, conn.transaction():
        newer = enqueue_sync(conn, NewJob(kind="k", key="k1"), queue=queue_name, schema=schema)
    assert newer != dead
    requeued = run_cli("jobq", "dead", "requeue", "--all", *pg_args(queue_name), env=env)
    assert requeued.returncode == 0, requeued.stderr  # before: a unique violation, none requeued
    assert sorted(keyed_rows(pg_dsn, schema)) == sorted([(dead, None, "pending"), (newer, "k1", "pending")])
