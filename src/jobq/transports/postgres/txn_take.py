"""A transaction-mode consumer's takes: each picked job locked in a transaction of its own.

A take is one round trip on a connection of its own (BEGIN, lock the job, marking it done and
counting its start, SAVEPOINT; claims.py), or, with an ack, the job's COMMIT and the next
job's take in one round trip on the job's connection. What a take brings is a delivery whose
``job.context`` is that connection (job_connection.py), or, for a job whose attempts were all
used up by crashes, a delivery carrying that fact (``Spent``) for the pool to decide on.
"""

from __future__ import annotations

import dataclasses
import logging

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.config import LimitsConfig
from jobq.core.errors import TransportError
from jobq.core.job import Delivery, Spent
from jobq.transports.postgres.claims import (
    GRACE,
    LOST,
    PICKED,
    Claim,
    ClaimStatement,
    Conn,
    Row,
    TakeFailedAfterCommit,
    take_count,
)
from jobq.transports.postgres.connect import live, translated
from jobq.transports.postgres.decode import row_to_delivery
from jobq.transports.postgres.decode import spent as used_up
from jobq.transports.postgres.job_connection import JobConnection
from jobq.transports.postgres.joined import Joined
from jobq.transports.postgres.txn_hold import Holdings
from jobq.transports.postgres.txn_state import TxnState
from jobq.transports.postgres.txn_tasks import ClaimTasks


class Taker:
    """Takes picked jobs, one transaction each, and makes their deliveries."""

    def __init__(self, pool: AsyncConnectionPool[Conn], claim: ClaimStatement, *,
                 state: TxnState, hold: Holdings, tasks: ClaimTasks, queue: str,
                 limits: LimitsConfig, joined: Joined, logger: logging.Logger) -> None:
        self._pool = pool
        self._claim = claim
        self._state = state
        self._hold = hold
        self._tasks = tasks
        self._queue = queue
        self._limits = limits
        self._joined = joined  # job.context.enqueue: follow-up jobs that commit with the ack
        self._log = logger
        self.takes = 0  # jobs taken, the rate the jobs picked ahead are sized by

    async def take(self, conn: Conn | None, row: Row) -> Delivery | None:
        """Lock the picked job of ``row`` in a new transaction on ``conn`` (or one from the pool)."""
        job_id = int(row[0])
        try:
            if conn is None:
                with translated("postgres claim"):
                    conn = await live(self._pool)
                self._hold.held.add(conn)
            with translated("postgres claim"):
                taken = await self._claim.take(conn, row)
        except BaseException as exc:
            if conn is not None:
                await self._hold.give_back(conn)
            if isinstance(exc, TransportError):
                await self._hold.untake([job_id], "a failed take")
            raise
        return await self._taken(conn, row, taken)

    async def take_with_commit(self, claim: Claim, row: Row) -> None:
        """The job's COMMIT and the take of ``row`` on its connection, in one round trip: the
        take's round trip, and the worker's trip through the pool and a receive, saved per job.
        The taken job waits among those ready for the receive the freed worker makes next, and
        the claim is let go (``let_go``) without giving its connection back. Raises the
        COMMIT's error only (psycopg.Error); a take that fails after it hands its job back."""
        conn, state = claim.conn, self._state
        try:
            taken = await self._claim.take(conn, row, commit=True)
        except TakeFailedAfterCommit as exc:
            self._log.debug("the take with job %d's COMMIT failed after it: %s", claim.job_id, exc)
            self._tasks.hand_back([row], "a failed take")
            return
        except psycopg.Error:
            self._tasks.hand_back([row], "a take with a failed COMMIT")
            raise
        claim.let_go = True  # its connection is the next job's from here on
        state.out.discard(claim.job_id)
        state.wake.set()
        delivery = await self._taken(conn, row, taken)
        if delivery is not None:
            self._tasks.hand_over(delivery)
            state.claim_done.set()

    async def _taken(self, conn: Conn, row: Row, taken: bool) -> Delivery | None:
        """After the take of ``row`` on ``conn``: its delivery, or None if it was no longer ours."""
        job_id = int(row[0])
        self._hold.picked.pop(job_id, None)
        self.takes += 1
        if not taken:  # picked again since (this take came after the pick's moment): theirs now
            self._log.warning("job %d was picked again before this consumer took it (its take "
                              "came more than %.0f s after its pick: an event loop blocked that "
                              "long?)", job_id, GRACE)
            await self._hold.give_back(conn)
            return None
        return self._deliver(conn, row)

    def _deliver(self, conn: Conn, row: Row) -> Delivery:
        """The delivery of a taken job; one whose attempts were all used up by crashes (every
        earlier start's consumer died before settling it) goes to the pool with that fact."""
        count = take_count(row)
        job_id, attempt, max_attempts = int(row[0]), int(row[4]) + count, int(row[5])
        spent = attempt > max_attempts
        used = attempt - 1 if spent else attempt  # a start that will not run does not count
        delivery = row_to_delivery((*row[:4], used, *row[5:7]), self._queue, self._limits)
        delivery.job = dataclasses.replace(delivery.job, context=JobConnection(conn, self._joined),
                                           redelivered=bool(row[LOST]))
        delivery.handle = Claim(conn, job_id, attempt, count, row[PICKED])
        if spent and count == 0 and used == max_attempts:  # the pick counted the last crash
            delivery.fact = Spent(f"the consumer died or lost its connection during each of its "
                                  f"{used} attempts (transaction mode)")
        elif spent:  # attempts used up before this pick: another writer's, or an operator's
            delivery.fact = used_up(used, max_attempts)
        return delivery
