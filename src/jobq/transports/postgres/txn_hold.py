"""What a transaction-mode consumer holds on the server, and its hand-backs.

The connections whose open transaction holds a taken job (each back to the pool once, its
transaction ended first), and the jobs picked and not yet taken (marked picked on the server
until their pick's moment passes: handed back sooner, their starts uncounted unless their
pick counted them).
"""

from __future__ import annotations

import contextlib
import logging

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.core.errors import TransportError
from jobq.transports.postgres.claims import OPEN, Claim, Conn
from jobq.transports.postgres.connect import taken, translated
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.txn_state import TxnState


class Holdings:
    """The connections held with a job's transaction, the jobs picked; giving them back."""

    def __init__(self, pool: AsyncConnectionPool[Conn], queries: Queries, state: TxnState,
                 worker: str, logger: logging.Logger) -> None:
        self._pool = pool
        self._state = state
        self._worker = worker
        self._log = logger
        self._unpick_sql = queries["txn_unpick"].as_bytes(None)
        self.held: set[Conn] = set()  # connections whose transaction holds a claimed job
        # Picked, not yet taken: job id -> whether its pick counted its start (STALE).
        self.picked: dict[int, bool] = {}

    async def give_back(self, conn: Conn) -> None:
        """Back to the pool, its transaction ended first (at most once per claim)."""
        if conn not in self.held:
            return
        self.held.discard(conn)
        if conn.info.transaction_status in OPEN:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
        with contextlib.suppress(psycopg.Error):
            await self._pool.putconn(conn)

    async def let_go(self, claim: Claim) -> None:
        """The job's connection back to the pool, once: given back, it may be another job's
        before this claim's settle is over (a failure recorded apart gives it back early)."""
        if not claim.let_go:
            claim.let_go = True
            await self.give_back(claim.conn)

    async def unstart(self, claim: Claim) -> None:
        """Roll back the job's transaction and free its row; its start does not count."""
        with translated("postgres release"):
            await claim.conn.rollback()  # the take's count with it, if it made one
            counted = [] if claim.count else [claim.job_id]
            await claim.conn.execute(self._unpick_sql, {
                "ids": [claim.job_id], "counted": counted, "worker": self._worker})
        await self.let_go(claim)

    async def put_back(self, claim: Claim) -> None:
        """A taken job that was never handed out, back to the queue unstarted, and the sweep
        begun again (the cursor is past it). Once: a claim let go holds nothing of its own."""
        if claim.let_go:
            return
        with contextlib.suppress(TransportError):
            await self.unstart(claim)
        await self.let_go(claim)
        self._state.sweep_again()

    async def unpick(self, ids: list[int]) -> None:
        """Free picked jobs for any consumer now, their starts uncounted unless picks did."""
        counted = [job_id for job_id in ids if self.picked.get(job_id)]
        with translated("postgres release"):
            async with taken(self._pool) as conn:
                await conn.execute(self._unpick_sql, {
                    "ids": ids, "counted": counted, "worker": self._worker})
        for job_id in ids:
            self.picked.pop(job_id, None)

    async def untake(self, ids: list[int], why: str) -> None:
        """Hand picked jobs back with their starts uncounted (a take failed, or they were
        picked ahead and not asked for), and sweep again from the start, since the cursor has
        moved past them (a --once sweep would end without them)."""
        try:
            await self.unpick(ids)
        except TransportError as exc:  # their pick's moment passes and frees them anyway
            self._log.debug("could not hand back jobs %s (%s): %s", ids[:10], why, exc)
        finally:
            # Once they are free, not before: a pick that runs while the hand-back waits for its
            # COMMIT skips them (still locked, still marked picked), finds nothing or moves the
            # cursor past them, and a --once drain would end without them.
            self._state.sweep_again()
