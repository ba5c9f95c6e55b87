"""Enqueue jobs into PostgreSQL: one INSERT per batch (one round trip, one NOTIFY).

Every job is checked before anything is inserted (limits.py: kind, payload and headers, their
sizes); with ``limits.max_pending`` rows go in only as far as the queue has room, and
``enqueue`` waits up to its timeout for room before raising QueueFull.

A cut connection is ridden out within the same timeout: each INSERT runs in a transaction
whose id it returns, so a failure before the COMMIT was sent is retried (nothing went in),
and a COMMIT whose answer was lost is settled by asking the server (``xact_status``) whether
that transaction committed. Only when it cannot be asked in time is the outcome unknown:
OutcomeUnknown says so.

With ``connection=`` the jobs go in inside the caller's own transaction instead (see joined.py):
they exist if and only if it commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.config import LimitsConfig, PostgresConfig
from jobq.core.backoff import QUEUE_FULL_BACKOFF, Backoff
from jobq.core.errors import ConnectionLost, OutcomeUnknown, QueueFull
from jobq.core.limits import encode_new_job
from jobq.core.port import NewJob
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.connect import pooled
from jobq.transports.postgres.joined import Joined, columns, refuse_keys_with_cap, statement
from jobq.transports.postgres.keys import insert_keyed
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.text import nul_free

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
CHUNK = 5000  # rows per INSERT: large enough to amortise the round trip, small enough to stream
# Between tries of an enqueue whose connection broke: brisk, a pool reconnects in milliseconds.
RECONNECT_BACKOFF = Backoff(base=0.05, cap=1.0)


class _NotCommitted(Exception):
    """An enqueue attempt that surely did not commit (``cause``: why): safe to send again."""

    def __init__(self, cause: ConnectionLost) -> None:
        self.cause = cause


def encode(job: NewJob, limits: LimitsConfig | None = None) -> tuple[str, str]:
    """Payload and headers as JSON text; MalformedJob / JobTooLarge naming what is wrong."""
    payload, headers = encode_new_job(job, limits or LimitsConfig())
    nul_free(payload, headers)
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
        self._network = settings.network_deadline
        self._joined = Joined(self._q, queue, max_attempts, self._limits)

    @property
    def joined(self) -> Joined:
        """Enqueues on a caller's connection, as this publisher is configured (see joined.py)."""
        return self._joined

    async def open(self) -> None:
        """Check the schema is there (the pool is opened by the container)."""
        await require_schema(pool_fetch(self._pool, self._q), self._schema, {"jobs": "SELECT,INSERT"},
                             "a producer")

    async def close(self) -> None:
        """Nothing to flush: every enqueue commits before it returns."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """Insert one job; return its id. QueueFull if the queue has no room within ``timeout``.

        ``connection``: a psycopg ``AsyncConnection`` inside an open transaction; the job is
        inserted there and exists if and only if that transaction commits (see joined.py).
        """
        (job_id,) = await self.enqueue_many([job], queue=queue, timeout=timeout,
                                            connection=connection)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """Insert jobs in chunks of one statement each; return their ids in order.

        A bad job refuses the whole call before anything is inserted. With max_pending, jobs go
        in, in order, as room allows; a QueueFull raised part-way carries the ids of those that
        went in (``.accepted``): they are queued and will run, the rest were not enqueued.
        ``connection``: as for ``enqueue``, one statement in the caller's transaction.
        """
        wait = self._limits.enqueue_timeout if timeout is None else timeout
        if connection is not None:
            if not isinstance(connection, psycopg.AsyncConnection):
                raise TypeError(f"connection must be a psycopg.AsyncConnection (got "
                                f"{type(connection).__name__}); for a sync one use "
                                f"jobq.transports.postgres.enqueue_sync")
            return await self._joined.enqueue_many(connection, jobs, queue=queue, timeout=wait)
        every = columns(jobs, self._limits, self._max_attempts)  # all checked before any I/O
        refuse_keys_with_cap(every, self._limits.max_pending)  # now, not after a first chunk
        deadline = asyncio.get_running_loop().time() + wait
        ids: list[str] = []
        for start in range(0, len(jobs), CHUNK):
            chunk = {name: values[start:start + CHUNK] for name, values in every.items()}
            await self._insert(queue or self._queue, chunk, ids, deadline, wait)
        return ids

    async def _insert(self, queue: str, columns: dict[str, list[Any]], ids: list[str],
                      deadline: float, wait: float) -> None:
        """Insert ``columns`` (appending to ``ids``); with max_pending, as room allows."""
        cap = self._limits.max_pending
        name, params = statement(queue, columns, cap)
        if name != "enqueue_bounded":
            ids.extend(await self._execute(name, params, ids, deadline, wait))
            return
        async for _ in QUEUE_FULL_BACKOFF.attempts(until=deadline):
            name, params = statement(queue, columns, cap)
            got = await self._execute(name, params, ids, deadline, wait)
            ids.extend(got)
            if len(got) == len(columns["kinds"]):
                return
            columns = {name: values[len(got):] for name, values in columns.items()}
        left = len(columns["kinds"])
        raise QueueFull(f"queue {queue!r} is full: {cap} jobs pending (limits.max_pending), "
                        f"no room for {left} more within {wait:g}s", accepted=tuple(ids))

    async def _execute(self, name: str, params: dict[str, Any], accepted: list[str],
                       deadline: float, wait: float) -> list[str]:
        """Run one enqueue statement; return the ids it inserted. Sent again, with backoff until
        ``deadline``, while a try surely did not commit; ConnectionLost saying these jobs were
        not enqueued once the time is up, OutcomeUnknown if the last try's fate is unknown."""
        cause: ConnectionLost | None = None
        async for _ in RECONNECT_BACKOFF.attempts(until=deadline):
            try:
                return await self._attempt(name, params, deadline, wait, accepted)
            except _NotCommitted as failed:
                cause = failed.cause
        count = len(params["kinds"])
        raise ConnectionLost(f"postgres enqueue: {count} jobs not enqueued: no try went through "
                             f"within {wait:g}s (limits.enqueue_timeout); last error: {cause}"
                             + (f" ({len(accepted)} earlier jobs of the call were)" if accepted
                                else "")) from cause

    async def _attempt(self, name: str, params: dict[str, Any], deadline: float, wait: float,
                       accepted: list[str]) -> list[str]:
        """One try in a transaction; _NotCommitted when it failed before its COMMIT was sent."""
        ids: list[str] = []
        xid: str | None = None  # of the transaction, once a row went in
        committing = False
        try:
            async with pooled(self._pool, "postgres enqueue", self._network) as conn, \
                    conn.transaction():
                if name == "enqueue_keyed":
                    ids, xid = await insert_keyed(conn, self._q, params)
                else:
                    cur = await conn.execute(self._q[name], params)
                    rows = await cur.fetchall()
                    ids, xid = [str(row[0]) for row in rows], (str(rows[0][1]) if rows else None)
                committing = True  # leaving the block sends COMMIT
        except ConnectionLost as exc:
            if not committing or xid is None:  # nothing went in (keyed: or only taken keys)
                raise _NotCommitted(exc) from exc
            status = await self._commit_status(xid, deadline)
            if status == "committed":
                return ids
            if status == "aborted":
                raise _NotCommitted(exc) from exc
            raise OutcomeUnknown(
                f"postgres enqueue: the connection broke while committing {len(ids)} jobs and "
                f"the server could not tell within {wait:g}s (limits.enqueue_timeout) whether "
                f"they went in: they may or may not be enqueued ({exc})",
                accepted=tuple(accepted), maybe=tuple(ids)) from exc
        return ids

    async def _commit_status(self, xid: str, deadline: float) -> str | None:
        """'committed' or 'aborted' as the server knows transaction ``xid``; None if it could
        not say before ``deadline`` (unreachable, still 'in progress', or forgotten)."""
        async for _ in RECONNECT_BACKOFF.attempts(until=deadline):
            try:
                async with pooled(self._pool, "postgres enqueue check", self._network) as conn:
                    cur = await conn.execute(self._q["xact_status"], {"xid": xid})
                    row = await cur.fetchone()
            except ConnectionLost:
                continue
            status = None if row is None else row[0]
            if status in ("committed", "aborted"):
                return str(status)
            if status is None:
                return None
        return None
