"""Schedules on Postgres: each tick fired in one transaction with its enqueue (schedules.py).

The row of ``<schema>.schedules`` is locked with SKIP LOCKED, checked, and moved in the
transaction that enqueues the tick's job (the publisher's transactional enqueue), so a tick
enqueues exactly once, whatever number of consumers on whatever hosts fire it.
"""

from __future__ import annotations

from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.feeds.schedules import Fired, Schedule
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.connect import pooled
from jobq.transports.postgres.publisher import PostgresPublisher
from jobq.transports.postgres.sql import Queries

# What firing a tick does to the tables (docs/security.md): the schedule's row, and the job
# (SELECT too: the publisher's enqueue reads back the ids, as PostgresPublisher.open checks).
NEEDS = {"schedules": "SELECT,INSERT,UPDATE", "jobs": "SELECT,INSERT"}


class PostgresTicks:
    """The fired ticks of a queue's schedules, in ``<schema>.schedules``."""

    def __init__(self, pool: AsyncConnectionPool, settings: PostgresConfig,
                 publisher: PostgresPublisher, *, queue: str) -> None:
        self._pool = pool
        self._cfg = settings
        self._publisher = publisher
        self._queue = queue
        self._q = Queries(settings.schema)

    async def open(self) -> None:
        """ConfigError (exit 2) naming the fix if the schedules table or a grant is missing."""
        await require_schema(pool_fetch(self._pool, self._q), self._cfg.schema, NEEDS,
                             "a consumer with schedules")  # the publisher's own check included

    async def fire(self, schedule: Schedule, tick: datetime) -> Fired:
        """Enqueue the tick's job unless it was fired (see schedules.Ticks)."""
        queue = schedule.queue or self._queue
        params = {"queue": queue, "name": schedule.name, "tick": tick}
        deadline = self._cfg.network_deadline
        async with pooled(self._pool, "postgres schedule", deadline) as conn, conn.transaction():
            cur = await conn.execute(self._q["schedule_seen"], params)
            if await cur.fetchone() is not None:
                return Fired.BEFORE
            cur = await conn.execute(self._q["schedule_take"], params)
            if await cur.fetchone() is None:
                # Fired already, or locked by a process firing it now, which may yet roll back
                # (killed, cut off): then this tick is still to fire, so ask again later.
                cur = await conn.execute(self._q["schedule_last"], params)
                row = await cur.fetchone()
                return Fired.BEFORE if row is not None and row[0] >= tick else Fired.BUSY
            await self._publisher.enqueue(schedule.job(tick), queue=queue, connection=conn)
            await conn.execute(self._q["schedule_fired"], params)
        return Fired.NOW

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        """The last tick each schedule of ``queue`` fired (``jobq schedules``)."""
        async with pooled(self._pool, "postgres schedule list", self._cfg.network_deadline) as conn:
            cur = await conn.execute(self._q["schedule_list"], {"queue": queue or self._queue})
            return {name: tick for name, tick in await cur.fetchall()}

    async def close(self) -> None:
        """Nothing held between ticks."""
