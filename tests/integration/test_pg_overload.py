"""Overload on the real PostgreSQL: limits.max_pending, enqueue(timeout=...) and QueueFull."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg import sql

from jobq.api import connect_publisher
from jobq.config import Settings, load_settings
from jobq.core.errors import QueueFull
from jobq.core.port import NewJob
from tests.conftest import ROOT, fetch, pg_args, run_cli, schema_env
from tests.integration.test_postgres import status_counts


def bounded(pg_dsn: str, schema: str, queue: str, max_pending: int) -> Settings:
    return load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.schema": schema, "queue": queue, "postgres.dsn": pg_dsn,
        "limits.max_pending": max_pending}, env={})


def finish_one(pg_dsn: str, schema: str, queue: str) -> None:
    """What a consumer does to one job, as far as the depth is concerned."""
    fetch(pg_dsn, sql.SQL("UPDATE {} SET status = 'done' WHERE id = (SELECT min(id) FROM {} "
                          "WHERE queue = %s AND status = 'pending') RETURNING id").format(
        sql.Identifier(schema, "jobs"), sql.Identifier(schema, "jobs")), [queue])


def test_a_full_queue_refuses_after_the_timeout_and_takes_work_again_when_there_is_room(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    settings = bounded(pg_dsn, schema, queue_name, 5)

    async def go() -> tuple[list[str], float, QueueFull, str, QueueFull]:
        async with connect_publisher(settings) as publisher:
            first = await publisher.enqueue_many([NewJob(kind="k", payload={"n": i}) for i in range(5)])
            started = time.monotonic()
            with pytest.raises(QueueFull) as full:
                await publisher.enqueue(NewJob(kind="k"), timeout=0.4)
            waited = time.monotonic() - started
            # Room appears while it waits (a consumer finished a job): it gets in.
            loop = asyncio.get_running_loop()
            loop.call_later(0.3, finish_one, pg_dsn, schema, queue_name)
            late = await publisher.enqueue(NewJob(kind="k"), timeout=5)
            finish_one(pg_dsn, schema, queue_name)
            finish_one(pg_dsn, schema, queue_name)
            with pytest.raises(QueueFull) as partial:
                await publisher.enqueue_many([NewJob(kind="k") for _ in range(4)], timeout=0.1)
            return first, waited, full.value, late, partial.value

    first, waited, full, late, partial = asyncio.run(go())
    assert len(first) == 5 and 0.4 <= waited < 2.0
    assert str(full) == (f"queue {queue_name!r} is full: 5 jobs pending (limits.max_pending), "
                         "no room for 1 more within 0.4s")
    assert full.accepted == ()
    assert len(partial.accepted) == 2  # batches go in max_pending at most; room was for 2
    counts = status_counts(pg_dsn, schema, queue_name)
    assert counts == {"pending": 5, "done": 3}  # nothing accepted was dropped
    ids = {str(i) for (i,) in fetch(pg_dsn, sql.SQL("SELECT id FROM {}").format(
        sql.Identifier(schema, "jobs")))}
    assert ids == {*first, late, *partial.accepted}


def test_the_producer_exits_4_with_one_line_when_the_queue_stays_full(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    env = schema_env(schema, JOBQ_LIMITS__MAX_PENDING="10", JOBQ_LIMITS__ENQUEUE_TIMEOUT="0.2")
    result = run_cli("producer", *pg_args(queue_name), "--count", "25", "--batch", "25", env=env)
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"jobq: queue {queue_name!r} is full: 10 jobs pending (limits.max_pending), no room for 15 "
        "more within 0.2s (10 of this batch were enqueued)")
    assert status_counts(pg_dsn, schema, queue_name) == {"pending": 10}
