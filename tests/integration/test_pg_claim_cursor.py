"""Lease claims start past the last job their consumer claimed (postgres/cursor.py), and a job
behind that point (committed late with an earlier run_at, released, rescued) is still claimed,
by the claim from the start that comes at least every FULL_EVERY seconds."""

from __future__ import annotations

import logging
import time

import pytest
from psycopg import sql

from jobq.config import ConnectConfig, PostgresConfig
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.cursor import FULL_EVERY
from tests.conftest import fetch
from tests.integration.test_pg_lease_crashes import lease_transport, produce

pytestmark = pytest.mark.integration


async def test_a_job_behind_the_cursor_is_claimed_within_a_second(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 4)
    pool = await open_pool(pg_dsn, ConnectConfig(), 2, logging.getLogger("test.cursor"),
                           network_timeout=PostgresConfig().network_deadline)
    t = lease_transport(pool, schema, queue_name)
    try:
        await t.open()
        first = await t.receive(2, 1)  # from the start: the cursor is now past these two
        assert len(first) == 2
        # A job that commits now with an earlier run_at than every job enqueued: behind it.
        [(late,)] = fetch(pg_dsn, sql.SQL(
            "INSERT INTO {} (queue, kind, payload, run_at) VALUES (%s, 'late', '{{}}', "
            "now() - interval '1 hour') RETURNING id").format(sql.Identifier(schema, "jobs")),
            (queue_name,))
        started = time.monotonic()
        got = [d.job.id for d in await t.receive(2, 1)]  # from the cursor: the two after
        assert str(late) not in got and len(got) == 2
        found = []
        while not found and time.monotonic() - started < FULL_EVERY + 2:
            found = [d.job.id for d in await t.receive(2, 0.2)]
        assert found == [str(late)]  # a claim from the start took it
        assert time.monotonic() - started < FULL_EVERY + 1
    finally:
        await t.close()
        await pool.close()
