"""The pool's decision for a transaction-mode job, carried out in the job's own transaction
(``common.carry_out`` calls these).

- ack: a bare COMMIT (the take marked the job done already), so the handler's writes, the
  job's ``done`` and its attempt appear together; with a job picked ahead for the worker it
  frees, the COMMIT carries that job's take (``Taker.take_with_commit``);
- retry, dead, cancelled: back to the savepoint taken with the claim, the failure written, and
  COMMIT, in one round trip; a job whose transaction ended without jobq (the handler ended
  it, or its COMMIT failed) has its failure written in a transaction of its own, fenced to
  the attempt; one whose attempts were all spent by crashes is buried unrun;
- release: rolled back, the job unlocked for others at once, its attempt uncounted.

An ack that cannot commit raises SettleRejected: the delivery is then still the pool's to
settle. Each settle gives the job's connection back and frees the worker's slot.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobq.core.attempts import AttemptError
from jobq.core.errors import (
    CommitFailed,
    ConnectionLost,
    JobqError,
    SettleRejected,
    TransactionOwned,
)
from jobq.core.job import Delivery, Spent
from jobq.transports.postgres.claims import OPEN, Claim, Conn
from jobq.transports.postgres.connect import taken, translated
from jobq.transports.postgres.job_connection import HOW
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.text import error_json, storable
from jobq.transports.postgres.txn_hold import Holdings
from jobq.transports.postgres.txn_schedule import Scheduler
from jobq.transports.postgres.txn_state import TxnState
from jobq.transports.postgres.txn_take import Taker

ENDED = ("the handler ended the job's transaction (a COMMIT or ROLLBACK statement through "
         "job.context), so the job's outcome could not commit with it; " + HOW)
# A COMMIT failed by these never failed by the job's doing: an operator's pg_terminate_backend
# or a server shutdown (57P01), a crash of another server process (57P02). The job runs again
# with that attempt uncounted (its pick handed back, Holdings.untake). A link lost without a
# word from the server stays the job's failure: its own statement may have crashed the backend.
NOT_THE_JOBS = (errors.AdminShutdown, errors.CrashShutdown)
ABORTED = ("the job's transaction was aborted by a statement that failed in the handler, and the "
           "handler returned normally: its writes cannot commit (re-raise database errors)")


class TxnSettler:
    """Carries out each of the five decisions in the job's transaction (``common.Settles``)."""

    def __init__(self, pool: AsyncConnectionPool[Conn], queries: Queries, *, state: TxnState,
                 hold: Holdings, schedule: Scheduler, taker: Taker, worker: str,
                 logger: logging.Logger) -> None:
        self._pool = pool
        self._state = state
        self._hold = hold
        self._schedule = schedule
        self._taker = taker
        self._worker = worker
        self._log = logger
        self._sql = {name: queries[name].as_bytes(None) for name in ("txn_bury", "txn_fail_apart")}
        self._fail_sql = b"; ".join(queries[name].as_bytes(None)
                                    for name in ("txn_undo", "txn_fail", "txn_commit"))
        self.buried = 0  # dead-lettered unrun: every attempt's consumer died before settling

    async def _ack(self, delivery: Delivery) -> None:
        """Commit: the job's done mark and the handler's writes together.

        SettleRejected if they cannot commit; the delivery is then still the pool's to settle.
        """
        claim: Claim = delivery.handle
        rejected = self._unfinished(claim)
        if rejected is None:
            spare = self._schedule.chained_spare()
            try:
                if spare is None:
                    await claim.conn.commit()  # txn_take marked it done already
                else:
                    await self._taker.take_with_commit(claim, spare)
            except psycopg.Error as exc:
                claim.ended = ("pending",)  # rolled back (or, the link lost, maybe committed)
                text = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                if isinstance(exc, NOT_THE_JOBS):
                    await self._hold.untake([claim.job_id], "its COMMIT's connection ended")
                    raise ConnectionLost(f"job {claim.job_id}'s COMMIT: the server ended its "
                                         f"connection ({text}): not the job's doing, it runs "
                                         "again, that attempt uncounted") from exc
                rejected = CommitFailed(f"the job's COMMIT failed: {text}")
            finally:
                if rejected is None and not claim.let_go:  # not passed on to the next job
                    await self._settled(claim)
        if rejected is not None:
            raise SettleRejected(rejected)

    def _unfinished(self, claim: Claim) -> JobqError | None:
        """Why the job's transaction cannot commit as the job's outcome, if it cannot."""
        status = claim.conn.info.transaction_status
        if status == TransactionStatus.INTRANS:
            return None
        if status == TransactionStatus.INERROR:  # the savepoint is still there: a plain failure
            return CommitFailed(ABORTED)
        claim.ended = ("done", "pending")
        return TransactionOwned(ENDED)

    async def _retry(self, delivery: Delivery, delay: float, reason: str,
                     error: AttemptError | None) -> None:
        """Roll the handler's writes back; back to pending, due ``delay`` seconds from now."""
        await self._fail(delivery.handle, "pending", delay, reason, error)

    async def _dead(self, delivery: Delivery, reason: str, error: AttemptError | None) -> None:
        """Roll the handler's writes back; status dead, ``last_error`` = reason. One whose
        attempts were spent before it ran is buried with the attempts its crashes used."""
        if isinstance(delivery.fact, Spent):
            await self._bury(delivery.handle, reason)
            return
        await self._fail(delivery.handle, "dead", 0.0, reason, error)

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Roll the handler's writes back; status cancelled, the request deleted."""
        await self._fail(delivery.handle, "cancelled", 0.0, reason, None)

    async def _release(self, delivery: Delivery) -> None:
        """Roll back, unlocking the job for others at once; its attempt does not count."""
        async with self._settling(delivery.handle, "release"):
            await self._hold.unstart(delivery.handle)

    @contextlib.asynccontextmanager
    async def _settling(self, claim: Claim, what: str) -> AsyncIterator[None]:
        """Driver errors translated; the connection given back and the worker's slot freed after."""
        try:
            with translated(f"postgres {what}"):
                yield
        finally:
            await self._settled(claim)

    async def _settled(self, claim: Claim) -> None:
        self._state.out.discard(claim.job_id)
        await self._hold.let_go(claim)
        self._state.wake.set()  # a receive waiting for a free worker slot may go on

    async def _fail(self, claim: Claim, status: str, delay: float, reason: str,
                    error: AttemptError | None) -> None:
        # Back to the savepoint taken with the claim: the handler's writes are undone, the
        # row stays locked while the failure is written, and all of it is one round trip.
        async with self._settling(claim, {"pending": "retry"}.get(status, status)):
            params = {"id": claim.job_id, "status": status, "delay": delay,
                      "reason": storable(reason), "error": error_json(error)}
            if not claim.ended and claim.conn.info.transaction_status in OPEN:
                try:
                    await psycopg.AsyncClientCursor(claim.conn).execute(self._fail_sql, params)
                    return
                except errors.InvalidSavepointSpecification:  # the handler ended it, began anew
                    pass
            claim.ended = claim.ended or ("done", "pending")
            await self._fail_apart(claim, params)

    async def _fail_apart(self, claim: Claim, params: dict[str, Any]) -> None:
        """The failure of a job whose transaction ended without jobq, in a transaction of its own."""
        await self._hold.let_go(claim)  # its transaction is not the job's (or broken): another
        async with taken(self._pool) as conn:
            cur = await conn.execute(self._sql["txn_fail_apart"], {
                **params, "worker": self._worker, "attempt": claim.attempt, "until": claim.until,
                "states": list(claim.ended)})
        if cur.rowcount == 0:
            self._log.warning("job %d: its failure was not recorded: the job is no longer as its "
                              "attempt %d left it (its COMMIT went through after all, or a pick "
                              "took it since)", claim.job_id, claim.attempt)

    async def _bury(self, claim: Claim, reason: str) -> None:
        """Dead, unrun, with the attempts its crashed starts used (this take's does not count)."""
        async with self._settling(claim, "dead"):
            await claim.conn.execute(self._sql["txn_bury"], {
                "id": claim.job_id, "attempts": claim.attempt - 1, "reason": storable(reason)})
            await claim.conn.commit()
        self.buried += 1
