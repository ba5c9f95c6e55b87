"""A lease consumer's statements keep walking indexes after its queue's table has grown.

psycopg prepares a statement at its sixth run and PostgreSQL keeps the generic plan it makes
then. Made while a new queue's table held a few rows, the claim's plan joined the picked ids to
the table by a sequential scan, and kept doing so as the table grew (autovacuum is off on
this server: no ANALYZE ever replans it), each claim reading every row. The server's own count
of sequential scans on the table tells: read once the consumer's connections have ended, when
each backend has flushed its statistics.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from jobq.config import load_settings
from jobq.core.job import ACK
from jobq.wiring.container import Container, get_transport
from tests.conftest import PG_DSN, ROOT, init_queue, jobs_table, schema_env, wait_until


def seq_scans(schema: str) -> int:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = %s AND "
                           "relname = 'jobs'", [schema]).fetchone()
    assert row is not None
    return int(row[0])


def backends(app: str) -> int:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           [app]).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def fresh_schema() -> Iterator[str]:
    """A schema made by ``jobq init``'s migrations on connections that have ended, so their
    scans (an index build reads the table) are counted before the test's own."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    app = f"jobq-plans-init-{name}"
    init_queue("postgres", "q", schema_env(name, JOBQ_POSTGRES__DSN=f"{PG_DSN}?application_name={app}"))
    assert wait_until(lambda: backends(app) == 0, 20), "jobq init's connections outlived it"
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.parametrize("async_commit", [True, False])  # false: claims and acks wait for the flush
def test_the_claims_walk_an_index_after_the_table_grew(fresh_schema: str,
                                                       async_commit: bool) -> None:
    schema = fresh_schema
    before = seq_scans(schema)
    app = f"jobq-plans-{uuid.uuid4().hex[:8]}"
    settings = load_settings(ROOT / "configs" / "postgres.yaml", {
        "queue": "q", "postgres.dsn": f"{PG_DSN}?application_name={app}",
        "postgres.notify": False, "postgres.async_commit": async_commit},
        env=schema_env(schema))
    table = jobs_table(schema)

    def insert(rows: int, status: str) -> None:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL(
                "INSERT INTO {} (queue, kind, payload, status, finished_at) SELECT 'q', 'k', "
                "'{{}}', %s, CASE WHEN %s = 'done' THEN now() END FROM generate_series(1, %s)"
            ).format(table), [status, status, rows])

    async def one_job_at_a_time(times: int) -> None:
        for _ in range(times):
            insert(1, "pending")
            batch = await transport.receive(10, 5.0)
            assert len(batch) == 1
            await transport.settle(batch[0], ACK)

    async def main() -> None:
        nonlocal transport
        container = Container(settings=settings)
        try:
            transport = await get_transport(container)
            await transport.open()
            try:
                await one_job_at_a_time(12)  # the claim is prepared on a table of a few rows
                insert(20_000, "done")
                await one_job_at_a_time(12)
            finally:
                await transport.close()
        finally:
            closing = container.shutdown_resources()
            if closing is not None:
                await closing

    transport = None
    asyncio.run(main())
    assert wait_until(lambda: backends(app) == 0, 20), "the consumer's connections outlived it"
    assert seq_scans(schema) == before
