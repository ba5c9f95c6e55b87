"""Enqueue jobs into PostgreSQL: one INSERT per batch (one round trip, one NOTIFY).

Every job is checked before anything is inserted (limits.py: kind, payload and headers, their
sizes); with ``limits.max_pending`` rows go in only as far as the queue has room, and
``enqueue`` waits up to its timeout for room before raising QueueFull.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.backoff import QUEUE_FULL_BACKOFF
from jobq.config import LimitsConfig, PostgresConfig
from jobq.errors import MalformedJob, QueueFull
from jobq.limits import encode_new_job
from jobq.transport import NewJob
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.connect import translated
from jobq.transports.postgres.sql import Queries

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
CHUNK = 5000  # rows per INSERT: large enough to amortise the round trip, small enough to stream
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # a JSON \u0000 escape, not an escaped backslash


def encode(job: NewJob, limits: LimitsConfig | None = None) -> tuple[str, str]:
    """Payload and headers as JSON text; MalformedJob / JobTooLarge naming what is wrong."""
    payload, headers = encode_new_job(job, limits or LimitsConfig())
    if _NUL.search(payload) or _NUL.search(headers):
        raise MalformedJob("payload or headers contain a NUL character (\\u0000), which "
                           "PostgreSQL cannot store in jsonb")
    return payload, headers


class PostgresPublisher:
    """Publisher for the Postgres backend."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 max_attempts: int, limits: LimitsConfig | None = None) -> None:
        self._pool = pool
        self._q = Queries(settings.schema)
        self._schema = settings.schema
        self._queue = queue
        self._max_attempts = max_attempts
        self._limits = limits or LimitsConfig()

    async def open(self) -> None:
        """Check the schema is there (the pool is opened by the container)."""
        await require_schema(pool_fetch(self._pool, self._q), self._schema, {"jobs": "SELECT,INSERT"},
                             "a producer")

    async def close(self) -> None:
        """Nothing to flush: every enqueue commits before it returns."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None) -> str:
        """Insert one job; return its id. QueueFull if the queue has no room within ``timeout``."""
        (job_id,) = await self.enqueue_many([job], queue=queue, timeout=timeout)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None) -> list[str]:
        """Insert jobs in chunks of one statement each; return their ids in order.

        A bad job refuses the whole call before anything is inserted. With max_pending, jobs go
        in, in order, as room allows; a QueueFull raised part-way carries the ids of those that
        went in (``.accepted``): they are queued and will run, the rest were not enqueued.
        """
        encoded = [encode(job, self._limits) for job in jobs]
        wait = self._limits.enqueue_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + wait
        ids: list[str] = []
        for start in range(0, len(jobs), CHUNK):
            chunk = jobs[start:start + CHUNK]
            columns: dict[str, list[Any]] = {
                "kinds": [job.kind for job in chunk],
                "payloads": [payload for payload, _ in encoded[start:start + CHUNK]],
                "headers": [headers for _, headers in encoded[start:start + CHUNK]],
                "max_attempts": [job.max_attempts or self._max_attempts for job in chunk],
                "delays": [float(job.delay) for job in chunk],
            }
            await self._insert(queue or self._queue, columns, ids, deadline, wait)
        return ids

    async def _insert(self, queue: str, columns: dict[str, list[Any]], ids: list[str],
                      deadline: float, wait: float) -> None:
        """Insert ``columns`` (appending to ``ids``); with max_pending, as room allows."""
        cap = self._limits.max_pending
        if not cap:
            ids.extend(await self._execute("enqueue", {"queue": queue, **columns}))
            return
        async for _ in QUEUE_FULL_BACKOFF.attempts(until=deadline):
            got = await self._execute("enqueue_bounded", {"queue": queue, "cap": cap, **columns})
            ids.extend(got)
            if len(got) == len(columns["kinds"]):
                return
            columns = {name: values[len(got):] for name, values in columns.items()}
        left = len(columns["kinds"])
        raise QueueFull(f"queue {queue!r} is full: {cap} jobs pending (limits.max_pending), "
                        f"no room for {left} more within {wait:g}s", accepted=tuple(ids))

    async def _execute(self, name: str, params: dict[str, Any]) -> list[str]:
        with translated("postgres enqueue"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(self._q[name], params)
                return [str(row[0]) for row in await cur.fetchall()]
