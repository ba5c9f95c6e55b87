"""A PostgreSQL queue as an outbox: its pending jobs taken in batches for ``jobq relay``.

Each batch is one transaction: the relay lock (one relay at a time per queue, tried), the
jobs locked in hand-out order, the caller's ``send`` (the RabbitMQ publish, confirmed), the
jobs marked done, COMMIT. A relay that dies or loses its connection before the COMMIT rolls
the batch back: the jobs are pending again and are published again (at least once, under
the same ids). Idle, it waits on LISTEN for the queue's enqueues.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig, PostgresConfig
from jobq.core.port import NewJob
from jobq.core.within import Deadline
from jobq.feeds.relay import Send
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.connect import taken, translated
from jobq.transports.postgres.listen import listen
from jobq.transports.postgres.sql import Queries

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
NEEDS = {"jobs": "SELECT,UPDATE"}  # docs/security.md


class PostgresOutbox:
    """One queue's pending jobs, handed to a relay a batch at a time."""

    def __init__(self, pool: Pool, settings: PostgresConfig, connect: ConnectConfig, *,
                 queue: str, logger: logging.Logger | None = None) -> None:
        self._pool = pool
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        self._q = Queries(settings.schema)
        self._key = f"{settings.schema}.{queue}"
        self._log = logger or logging.getLogger("jobq.postgres")
        self._wake = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Check the schema and grants; start listening for the queue's enqueues."""
        await require_schema(pool_fetch(self._pool, self._q), self._cfg.schema, NEEDS,
                             "jobq relay")
        self._listener = asyncio.create_task(listen(
            self._cfg.dsn, self._connect, self._q.channel, self._queue, self._wake.set,
            self._log, network_timeout=self._cfg.network_deadline), name="jobq-relay-listen")

    async def close(self) -> None:
        """Stop listening."""
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener

    async def wait(self, timeout: float) -> None:
        """Until the queue gets a new job (a NOTIFY) or ``timeout`` s pass."""
        with contextlib.suppress(TimeoutError):
            async with Deadline(timeout):
                await self._wake.wait()
        self._wake.clear()

    async def relay(self, limit: int, send: Send) -> int | None:
        """Take up to ``limit`` pending jobs, ``send`` them (ids, jobs), mark them done (those
        ``send`` refused dead, with its reason), commit; how many. None when another relay holds
        the queue this moment. If ``send`` raises, the batch rolls back and stays pending."""
        with translated("postgres relay"):
            async with taken(self._pool) as conn, conn.transaction():
                cur = await conn.execute(self._q["relay_lock"], {"key": self._key})
                row = await cur.fetchone()
                if not (row and row[0]):
                    return None
                cur = await conn.execute(self._q["relay_take"], {"queue": self._queue,
                                                                 "limit": limit})
                rows = await cur.fetchall()
                if not rows:
                    return 0
                ids = [str(r[0]) for r in rows]
                refused = await send(ids, [_job(r) for r in rows])
                await conn.execute(self._q["relay_done"], {
                    "ids": [r[0] for r in rows if str(r[0]) not in refused]})
                if refused:
                    await conn.execute(self._q["relay_refused"], {
                        "ids": [int(i) for i in refused], "reasons": list(refused.values())})
        return len(rows)


def _job(row: Sequence[Any]) -> NewJob:
    _, kind, payload, headers, max_attempts, run_at, priority = row
    return NewJob(kind=kind, payload=json.loads(payload), headers=json.loads(headers),
                  max_attempts=max_attempts, run_at=run_at, priority=priority)
