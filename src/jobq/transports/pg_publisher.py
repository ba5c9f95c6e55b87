"""Enqueue jobs into PostgreSQL: one INSERT per batch (one round trip, one NOTIFY)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.errors import MalformedJob
from jobq.sql import Queries
from jobq.transport import NewJob
from jobq.transports.pg_connect import translated

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
CHUNK = 5000  # rows per INSERT: large enough to amortise the round trip, small enough to stream


def encode(job: NewJob) -> tuple[str, str]:
    """Payload and headers as JSON text; MalformedJob if they are not JSON objects."""
    if not job.kind:
        raise MalformedJob("kind must be a non-empty string")
    if not isinstance(job.payload, dict):
        raise MalformedJob(f"payload must be a JSON object, got {type(job.payload).__name__}")
    try:
        return json.dumps(job.payload), json.dumps(dict(job.headers))
    except (TypeError, ValueError) as exc:
        raise MalformedJob(f"payload is not JSON-serialisable: {exc}") from exc


class PostgresPublisher:
    """Publisher for the Postgres backend."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 max_attempts: int) -> None:
        self._pool = pool
        self._q = Queries(settings.schema)
        self._queue = queue
        self._max_attempts = max_attempts

    async def open(self) -> None:
        """Nothing to do: the pool is opened by the container."""

    async def close(self) -> None:
        """Nothing to flush: every enqueue commits before it returns."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None) -> str:
        """Insert one job; return its id."""
        (job_id,) = await self.enqueue_many([job], queue=queue)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None) -> list[str]:
        """Insert jobs in chunks of one statement each; return their ids in order."""
        ids: list[str] = []
        for start in range(0, len(jobs), CHUNK):
            chunk = jobs[start:start + CHUNK]
            encoded = [encode(job) for job in chunk]
            params = {
                "queue": queue or self._queue,
                "kinds": [job.kind for job in chunk],
                "payloads": [payload for payload, _ in encoded],
                "headers": [headers for _, headers in encoded],
                "max_attempts": [job.max_attempts or self._max_attempts for job in chunk],
                "delays": [float(job.delay) for job in chunk],
            }
            with translated("postgres enqueue"):
                async with self._pool.connection() as conn:
                    cur = await conn.execute(self._q["enqueue"], params)
                    ids.extend(str(row[0]) for row in await cur.fetchall())
        return ids
