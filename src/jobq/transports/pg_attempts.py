"""The attempt log of transaction mode: attempt starts counted outside the jobs' transactions.

A transaction-mode job runs inside the transaction that locked its row, and a process that
dies mid-job rolls that transaction back: anything the job's own row said about the attempt
is undone with it. So each start is counted here first, in a statement that commits on a
connection of its own before the handler runs. A job that kills its process on every attempt
is then still seen using its attempts, and ends dead after ``max_attempts`` instead of looping.

Claims that lock their jobs at about the same time share one statement: while one is in
flight, the starts that arrive queue up, and the writer takes them all as its next batch.
(A second writer on a second connection was tried: on 2 cores it drained no faster, and
spent more CPU per job.) The same statement deletes the entries of jobs acked since:
their count is in the job's row now.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.errors import TransportError
from jobq.sql import Queries
from jobq.transports.pg_connect import translated

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Pool = AsyncConnectionPool[Conn]


def array(ids: Iterable[int]) -> str:
    """A bigint[] literal: sent as one text value, cheaper than a list adapted item by item."""
    return "{" + ",".join(map(str, ids)) + "}"


class AttemptLog:
    """Counts attempt starts, batched across claims, on one connection of its own.

    The connection is kept rather than taken from the pool per batch: the claims waiting for
    their count may hold every other connection of the pool.
    """

    def __init__(self, pool: Pool, queries: Queries) -> None:
        self._pool = pool
        self._count = queries["txn_attempt"].as_bytes(None)
        self._forget = queries["txn_forget"].as_bytes(None)
        self._idle: list[Conn] = []  # the connection, while no statement is in flight
        self._writing = False
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self._done: list[int] = []

    async def started(self, job_id: int) -> int:
        """Count a start of ``job_id``; return its starts not yet settled, this one included."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting[job_id] = future
        if not self._writing:  # else the writer in flight takes it when it is done
            self._writing = True
            try:
                while self._waiting:
                    await self._flush()
            finally:
                self._writing = False
        return await future

    def acked(self, job_id: int) -> None:
        """``job_id`` is done and its count folded into its row: forget it with the next batch."""
        self._done.append(job_id)

    async def close(self) -> None:
        """Forget the jobs acked since the last batch; give the connections back to the pool.

        The forget is housekeeping (a leftover entry of a done job is never read again), so a
        connection lost at shutdown must not fail it: the consumer exits 0 after a clean drain.
        """
        try:
            if self._done:
                with contextlib.suppress(TransportError):
                    await self._write(self._forget, {"done": array(self._done)})
        finally:
            idle, self._idle = self._idle, []
            for conn in idle:
                await self._pool.putconn(conn)

    async def _flush(self) -> None:
        batch, self._waiting = self._waiting, {}
        done, self._done = self._done, []
        try:
            rows = await self._write(self._count, {"ids": array(batch), "done": array(done)})
        except BaseException as exc:
            self._done[:0] = done
            failure = exc if isinstance(exc, TransportError) else TransportError("attempt log: interrupted")
            for future in batch.values():
                if not future.done():
                    future.set_exception(type(failure)(str(failure)))
            if not isinstance(exc, TransportError):
                raise
            return
        counts = {int(job_id): int(started) for job_id, started in rows}
        for job_id, future in batch.items():
            if not future.done():
                future.set_result(counts.get(job_id, 1))

    async def _write(self, statement: bytes, params: dict[str, str]) -> list[Any]:
        with translated("postgres attempt log"):
            if self._idle:
                conn = self._idle.pop()
            else:
                conn = await self._pool.getconn()
                # It may have served claims, which switch psycopg's preparing off (pg_claim).
                conn.prepare_threshold = 5
            try:
                cur = await conn.execute(statement, params)
                rows = await cur.fetchall() if cur.description else []
            except BaseException:
                await self._pool.putconn(conn)  # the pool closes it if it broke
                raise
            self._idle.append(conn)
            return rows
