"""A pool connection the server already ended (pg_terminate_backend, idle_session_timeout, a
restart) is noticed before use and replaced, instead of failing the claim, ack or enqueue
that takes it (connect.live). Under the steady fault suite's pg_terminate_backend twice a
second, every idle connection was dead by its next use: lease mode's claims failed one after
another and no job ran for the 20 s the cuts lasted."""

from __future__ import annotations

import logging
import time
import uuid

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig
from jobq.transports.postgres import connect
from jobq.transports.postgres.connect import Conn, open_pool, pooled
from tests.conftest import fetch


def terminate_all(dsn: str, app: str, timeout: float = 10.0) -> int:
    """End every backend named ``app``; return how many, once none is left."""
    (cut,), = fetch(dsn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                         "WHERE application_name = %s", (app,))
    deadline = time.monotonic() + timeout
    while fetch(dsn, "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (app,)):
        assert time.monotonic() < deadline, "the terminated backends did not go"
        time.sleep(0.01)
    assert isinstance(cut, int)
    return cut


async def test_a_connection_the_server_ended_is_replaced_before_use(pg_dsn: str) -> None:
    app = f"jobq-hung-up-{uuid.uuid4().hex[:8]}"
    dsn = conninfo.make_conninfo(pg_dsn, application_name=app)
    pool: AsyncConnectionPool[Conn] = await open_pool(
        dsn, ConnectConfig(), 3, logging.getLogger("test"), network_timeout=5)
    try:
        async with pooled(pool, "warm", 5) as conn:
            await conn.execute("SELECT 1")
        # Every connection of the pool ended while idle: the next unit of work must not fail.
        assert terminate_all(pg_dsn, app) == 3
        for _ in range(3):
            async with pooled(pool, "after the cut", 5) as conn:
                assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await pool.close()


async def test_only_a_connection_the_server_ended_counts_as_hung_up(pg_dsn: str) -> None:
    app = f"jobq-hung-up-{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True,
                                                     application_name=app) as conn:
        await conn.execute("SELECT 1")
        assert not connect.hung_up(conn)  # idle, alive: nothing waits on its socket
        assert terminate_all(pg_dsn, app) == 1
        assert connect.hung_up(conn)
