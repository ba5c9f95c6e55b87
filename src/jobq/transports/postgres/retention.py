"""Retention: delete a queue's done and dead jobs once they are older than ``postgres.retention``.

Consumers run ``Pruner.run`` beside their other background work; ``jobq prune`` runs
``Pruner.prune``. Both go through ``_locked``: one pruner at a time per schema and queue
(a session advisory lock on the pruner's connection, for the round), deleting in batches of
at most ``retention.batch`` rows fitted to the statement deadline (``postgres.network_timeout``),
each its own transaction. A failed round is logged and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.core.durations import format_duration
from jobq.core.errors import TransportError, describe
from jobq.transports.postgres.connect import deadline, live, translated
from jobq.transports.postgres.sql import Queries

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Pool = AsyncConnectionPool[Conn]
STATES = ("done", "dead")
FIRST_ROUND = 5.0  # seconds after start: soon, but not in the start-up's own rush of statements
BUDGET = 0.25  # of the statement deadline one DELETE may take before the batches are halved
LOCK_POLL = 0.5  # how often `jobq prune` tries again for the lock a consumer's round holds


def consumer_needs(needs: Mapping[str, str], who: str, pruner: Pruner | None
                   ) -> tuple[dict[str, str], str]:
    """What a consumer checks at start (``require_schema``): ``needs`` and ``who`` needs them,
    with DELETE on the jobs table when it prunes (a role without it fails at start, exit 2,
    rather than every round)."""
    if pruner is None or not pruner.enabled:
        return dict(needs), who
    return {**needs, "jobs": f"{needs['jobs']},DELETE"}, f"{who} with postgres.retention"


def start(pruner: Pruner | None) -> list[asyncio.Task[None]]:
    """The consumer's pruning task, started (none when retention is off)."""
    if pruner is None or not pruner.enabled:
        return []
    return [asyncio.create_task(pruner.run(), name="jobq-pg-prune")]


class Pruner:
    """Deletes one queue's finished jobs past their retention, one pruner at a time."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 logger: logging.Logger | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._clock = clock  # times each DELETE, to fit the next batch
        self._retention = settings.retention
        self._deadline = settings.network_deadline
        self._queue = queue
        self._q = Queries(settings.schema)
        self._key = f"{settings.schema}.{queue}"
        self._log = logger or logging.getLogger("jobq.postgres")
        # Rows per DELETE, at most retention.batch: halved after a statement that took more
        # than BUDGET of the deadline (or failed), doubled back after a quick one. A batch of
        # large rows (TOASTed payloads) could outlast the deadline, and would then fail every
        # round, for ever.
        self.batch = settings.retention.batch
        self.pruned = dict.fromkeys(STATES, 0)  # rows this process deleted, by state
        self.skipped = 0  # rounds left to another pruner that held the lock

    @property
    def enabled(self) -> bool:
        """True when ``postgres.retention`` gives done or dead jobs an end."""
        return self._retention.enabled

    def counters(self) -> dict[str, int]:
        """Rows deleted by state, as ``Transport.counters`` keys."""
        return {f"pruned_{state}": n for state, n in self.pruned.items()}

    async def run(self) -> None:
        """Prune every ``retention.interval`` seconds (the first round soon after start) until
        cancelled; a failed round is logged, never raised: the consumer goes on."""
        interval = self._retention.interval
        await asyncio.sleep(min(FIRST_ROUND, interval))
        while True:
            try:
                await self.round()
            except TransportError as exc:
                self._log.warning("pruning queue %r failed (%s); next round in %s, %d rows per "
                                  "statement", self._queue, describe(exc),
                                  format_duration(interval), self.batch)
            except Exception:  # a bug must cost the pruning a round, never the consumer
                self._log.exception("pruning queue %r failed unexpectedly; next round in %s",
                                    self._queue, format_duration(interval))
            await asyncio.sleep(interval)

    async def round(self) -> dict[str, int] | None:
        """One round with the configured retention: rows deleted by state, or None when
        another pruner holds the lock (this round is skipped)."""
        ages = {state: age for state in STATES if (age := self._retention.of(state)) is not None}
        if not ages:
            return {}
        return await self._prune(ages, wait=False)

    async def prune(self, state: str, older_than: float) -> int:
        """Delete the queue's ``state`` jobs finished more than ``older_than`` seconds ago, in
        batches; waits for a consumer's round holding the lock to end. How many were deleted."""
        pruned = await self._prune({state: older_than}, wait=True)
        assert pruned is not None  # waited for the lock
        return pruned[state]

    async def _prune(self, ages: Mapping[str, float], *, wait: bool) -> dict[str, int] | None:
        started = time.monotonic()
        async with self._locked(wait=wait) as conn:
            if conn is None:
                self.skipped += 1
                self._log.debug("prune of queue %r skipped: another pruner holds it", self._queue)
                return None
            try:
                pruned = {state: await self._batches(conn, state, age)
                          for state, age in ages.items()}
            except TransportError:
                self.batch = max(1, self.batch // 2)
                raise
        if any(pruned.values()):
            self._log.info("pruned queue %r: %s (%.2fs)", self._queue, ", ".join(
                f"{pruned[s]} {s} jobs older than {format_duration(a)}" for s, a in ages.items()),
                time.monotonic() - started)
        return pruned

    async def _batches(self, conn: Conn, state: str, older_than: float) -> int:
        """Delete batch after batch until one comes back short; the rows deleted."""
        total = 0
        while True:
            batch = self.batch
            started = self._clock()
            cur = await self._execute(conn, "prune", {"queue": self._queue, "status": state,
                                                      "older_than": older_than, "batch": batch})
            self._fit(self._clock() - started)
            deleted = max(cur.rowcount, 0)
            total += deleted
            self.pruned[state] += deleted  # counted as it commits: a later batch may fail
            if deleted < batch:
                return total

    def _fit(self, took: float) -> None:
        """The next DELETE's batch, from how long this one took."""
        budget = self._deadline * BUDGET
        if took > budget:
            self.batch = max(1, self.batch // 2)
        elif took < budget / 4:
            self.batch = min(self._retention.batch, self.batch * 2)

    @contextlib.asynccontextmanager
    async def _locked(self, *, wait: bool) -> AsyncIterator[Conn | None]:
        """A pool connection holding the queue's prune lock, or None if another pruner holds
        it (``wait``: try again until it is free). The connection is closed, not returned,
        when anything fails: its session lock must not go back to the pool with it."""
        with translated("postgres prune"):
            conn = await live(self._pool, self._deadline)
        try:
            waited = False
            while not await self._try_lock(conn):
                if not wait:
                    yield None
                    return
                if not waited:
                    waited = True
                    self._log.info("another pruner (a consumer of queue %r) is pruning it; "
                                   "waiting for it to finish", self._queue)
                await asyncio.sleep(LOCK_POLL)
            yield conn
            await self._execute(conn, "prune_unlock", {"key": self._key})
        except BaseException:
            await conn.close()
            raise
        finally:
            await self._pool.putconn(conn)

    async def _try_lock(self, conn: Conn) -> bool:
        cur = await self._execute(conn, "prune_lock", {"key": self._key})
        row = await cur.fetchone()
        return bool(row and row[0])

    async def _execute(self, conn: Conn, name: str, params: dict[str, Any]
                       ) -> psycopg.AsyncCursor[tuple[Any, ...]]:
        """One statement with the deadline every jobq statement has, errors translated."""
        what = f"postgres {name}"
        with translated(what):
            async with deadline(what, self._deadline):
                return await conn.execute(self._q[name], params)
