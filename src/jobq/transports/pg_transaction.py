"""PostgreSQL transport, transaction mode: the classic SKIP LOCKED sweep, effects exactly once.

Each job runs in the transaction that locked its row; the delivery carries that connection as
``job.context``. One round trip begins it, locks the next job past the sweep's cursor (marking
it done, still uncommitted) and takes a savepoint (pg_claim); the attempt log counts the start
on another connection (pg_attempts); success is a bare COMMIT, so the handler's writes and the
job's ``done`` appear together. A failure rolls back to the savepoint and records itself in the
same transaction; a crash rolls everything back and frees the row at once. Claims run as
concurrent tasks, up to one per free worker (one at a time after a claim found nothing,
doubling as they find jobs). docs/claim-modes.md says when to use this mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.errors import TransportError
from jobq.job import Delivery
from jobq.sql import Queries
from jobq.transports.pg_admin import require_schema
from jobq.transports.pg_attempts import AttemptLog
from jobq.transports.pg_claim import Claim, ClaimStatement, Conn, Row, Sweep
from jobq.transports.pg_connect import translated
from jobq.transports.pg_decode import row_to_delivery
from jobq.transports.pg_listen import listen

Pool = AsyncConnectionPool[Conn]
OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)
NEEDS = {"jobs": "SELECT,UPDATE", "attempts": "SELECT,INSERT,UPDATE,DELETE"}  # docs/security.md
STATEMENTS = ("txn_recount", "txn_bury", "txn_unstart", "txn_sweep_start")


class PgTransactionTransport:
    """Transaction-mode consumer of one queue: one connection and transaction per running job."""

    name = "postgres"
    drain_timeout = 0.0  # a claim that finds nothing is the truth: no need to wait

    def __init__(self, pool: Pool, settings: PostgresConfig, connect: ConnectConfig, *, queue: str,
                 concurrency: int, once: bool = False, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None) -> None:
        self._pool = pool
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        self._concurrency = concurrency
        self._once = once
        queries = Queries(settings.schema)
        self._channel = queries.channel
        self._sql = {name: queries[name].as_bytes(None) for name in STATEMENTS}
        self._fail_sql = b"; ".join(queries[name].as_bytes(None)
                                    for name in ("txn_undo", "txn_fail", "txn_commit"))
        self._log = logger or logging.getLogger("jobq.postgres")
        self._attempts = AttemptLog(pool, queries)
        self._claim = ClaimStatement(queries, self._log)
        self._held: set[Conn] = set()  # connections whose transaction holds a claimed job
        self._claiming: set[asyncio.Task[Delivery | None]] = set()
        self._ready: list[Delivery] = []  # claimed for a free worker, not yet handed out
        self._delivered = 0  # handed out and not yet settled
        self._error: BaseException | None = None  # a failed claim, raised when nothing else is left
        self._dry = False  # the last claim found nothing: wait for news before claiming again
        self._width = 1  # claims at once: 1 after one found nothing, doubled by each that finds
        self._slots = concurrency
        self._sweep = Sweep(None, 0.0)
        self._wake = asyncio.Event()  # a NOTIFY came, or a settle freed a worker slot
        self._news = False  # a NOTIFY came since the sweep began
        self._claim_done = asyncio.Event()  # a claim task finished
        self._tasks: list[asyncio.Task[None]] = []
        self.buried = 0

    async def open(self) -> None:
        """Check and open the connections the workers will hold; fix a --once sweep's end."""
        size = self._pool.max_size
        need = self._concurrency + 1  # one per running job, one for the attempt log
        self._slots = max(1, min(self._concurrency, size - 1))
        if size < need:
            self._log.warning(
                "postgres.pool_size %d is too small for transaction mode with concurrency %d: "
                "each running job holds a connection and the attempt log one more, so at most "
                "%d jobs will run at once; set pool_size to %d or more (0 derives it)",
                size, self._concurrency, self._slots, need)
        await require_schema(self._pool, self._cfg.schema, NEEDS, "a transaction-mode consumer")
        with translated("postgres connect"):
            # Open them all now: a server short of connections fails here, not mid-sweep.
            await self._pool.resize(min_size=size, max_size=size)
            await self._pool.wait(timeout=self._connect.timeout * self._connect.attempts)
        if self._once:  # the jobs due now, and no more: the sweep ends
            with translated("postgres sweep"):
                async with self._pool.connection() as conn:
                    cur = await conn.execute(self._sql["txn_sweep_start"])
                    until = (await cur.fetchall())[0][0]
            self._sweep = Sweep(until, asyncio.get_running_loop().time())
        if not self._once and self._cfg.notify:
            self._tasks.append(asyncio.create_task(listen(
                self._cfg.dsn, self._connect, self._channel, self._queue, self._notify, self._log),
                name="jobq-pg-listen"))
        self._log.info("transaction mode: up to %d jobs at once, each in its own transaction "
                       "(pool of %d connections)", self._slots, size)

    async def close(self) -> None:
        """Stop claiming and listening; roll back whatever is still held, free the connections."""
        if self._claiming:  # let them finish (a round trip) so what they locked is handed back
            await asyncio.wait(self._claiming, timeout=self._connect.timeout)
        pending: list[asyncio.Task[Any]] = [*self._tasks, *self._claiming]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        for delivery in self._ready:  # claimed but never handed out: the attempt does not count
            with contextlib.suppress(TransportError):
                await self._unstart(delivery.handle)
        self._ready.clear()
        for conn in list(self._held):  # a forced stop left jobs running: roll them back
            await self._give_back(conn)
        await self._attempts.close()

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Claim up to ``max_count`` jobs, one transaction each; if none, wait for a NOTIFY or poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            now = loop.time()
            if self._news or (not self._once and now - self._sweep.started_at > self._cfg.poll_interval):
                # Back to the start of the due jobs (no round trip: the cursor is ours). After a
                # NOTIFY: the new jobs may lie behind the cursor (an insert that began before
                # the jobs claimed last, committed after them). Every poll interval: so jobs
                # passed over meanwhile (a rolled-back claim of another consumer) are found.
                self._sweep = Sweep(None, now)
                self._dry = self._news = False
            self._start_claims(max_count)
            if self._ready:
                handed, self._ready = self._ready[:max_count], self._ready[max_count:]
                self._delivered += len(handed)
                return handed
            if self._claiming:  # never report "nothing" while a claim may still find a job
                self._claim_done.clear()
                await self._claim_done.wait()
                continue
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            remaining = deadline - now
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(remaining, self._cfg.poll_interval))
            self._dry = False

    async def ack(self, delivery: Delivery) -> None:
        """Mark the job done and commit: the handler's writes commit with it."""
        claim: Claim = delivery.handle
        async with self._settling(claim, "ack"):
            if claim.conn.info.transaction_status != TransactionStatus.INTRANS:
                raise TransportError(
                    f"postgres ack: job {claim.job_id}'s transaction was aborted by a failed "
                    "statement or ended by the handler, so its writes cannot commit; it runs again "
                    "in a later sweep (a handler must re-raise database errors, and must not "
                    "commit or roll back job.context)")
            await claim.conn.commit()  # txn_claim marked it done already
            self._attempts.acked(claim.job_id)

    async def retry(self, delivery: Delivery, delay: float, reason: str) -> None:
        """Roll the handler's writes back; back to pending, due ``delay`` seconds from now."""
        await self._fail(delivery.handle, "pending", delay, reason)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Roll the handler's writes back; status dead, ``last_error`` = reason."""
        await self._fail(delivery.handle, "dead", 0.0, reason)

    async def release(self, delivery: Delivery) -> None:
        """Roll back, unlocking the job for others at once; its attempt does not count."""
        async with self._settling(delivery.handle, "release"):
            await self._unstart(delivery.handle)

    async def _fail(self, claim: Claim, status: str, delay: float, reason: str) -> None:
        # Back to the savepoint taken with the claim: the handler's writes are undone, the
        # row stays locked while the failure is written, and all of it is one round trip.
        async with self._settling(claim, "retry" if status == "pending" else "dead"):
            await psycopg.AsyncClientCursor(claim.conn).execute(self._fail_sql, {
                "id": claim.job_id, "attempts": claim.attempt, "status": status,
                "delay": delay, "reason": reason})

    async def _unstart(self, claim: Claim) -> None:
        with translated("postgres release"):
            await claim.conn.rollback()
            await claim.conn.execute(self._sql["txn_unstart"], {"id": claim.job_id})
        await self._give_back(claim.conn)

    @contextlib.asynccontextmanager
    async def _settling(self, claim: Claim, what: str) -> AsyncIterator[None]:
        """Driver errors translated; the connection given back and the worker's slot freed after."""
        try:
            with translated(f"postgres {what}"):
                yield
        finally:
            self._delivered -= 1
            await self._give_back(claim.conn)
            self._wake.set()  # a receive waiting for a free worker slot may go on

    def _notify(self) -> None:
        """A NOTIFY for the queue (or the LISTEN connection is back): new jobs may be due."""
        self._news = True
        self._wake.set()

    def _start_claims(self, max_count: int) -> None:
        """One claim task per free worker not already being claimed for."""
        if self._dry or self._error is not None:
            return
        room = min(max_count, self._slots - self._delivered) - len(self._claiming) - len(self._ready)
        # A queue that is idle, or fed a job at a time, costs about one claim per job, not one
        # per free worker: after a claim found nothing, they ramp up as claims find jobs.
        room = min(room, self._width - len(self._claiming))
        if room <= 0:
            return
        self._wake.clear()  # news from now on is news to the claims started here
        for _ in range(room):
            task = asyncio.create_task(self._claim_one())
            self._claiming.add(task)
            task.add_done_callback(self._claimed)

    def _claimed(self, task: asyncio.Task[Delivery | None]) -> None:
        self._claiming.discard(task)
        self._claim_done.set()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.debug("claim failed: %s", error)
            self._error = self._error or error  # the pool logs it and backs off
        elif (delivery := task.result()) is not None:
            self._ready.append(delivery)
            self._width = min(self._slots, self._width * 2)

    async def _claim_one(self) -> Delivery | None:
        """Lock the next job past the cursor in a new transaction and count its attempt."""
        with translated("postgres claim"):
            conn = await self._pool.getconn()
        self._held.add(conn)
        try:
            row = await self._lock_next(conn)
            if row is None:
                self._dry, self._width = True, 1
                await self._give_back(conn)
                return None
            started = await self._attempts.started(int(row[0]))
            return await self._deliver(conn, row, started)
        except BaseException:
            await self._give_back(conn)
            raise

    async def _lock_next(self, conn: Conn) -> Row | None:
        """Lock the next job of the sweep, past its cursor."""
        sweep = self._sweep  # a new sweep may begin while this claim runs
        with translated("postgres claim"):
            row = await self._claim.claim(conn, sweep, self._queue)
        if row is not None:
            sweep.passed(row)
        return row

    async def _deliver(self, conn: Conn, row: Row, started: int) -> Delivery | None:
        """The delivery of a locked job, or None if its attempts were all used up by crashes."""
        job_id, settled, max_attempts = int(row[0]), int(row[4]), int(row[5])
        attempt = settled + started
        if attempt > max_attempts:
            await self._bury(conn, job_id, attempt - 1)
            return None
        if started > 1:  # earlier starts never settled: their consumer died mid-job
            with translated("postgres claim"):
                await conn.execute(self._sql["txn_recount"], {"id": job_id, "attempts": attempt})
        delivery = row_to_delivery(row[:7], self._queue, self._limits)
        delivery.job = dataclasses.replace(delivery.job, attempt=attempt, context=conn)
        delivery.handle = Claim(conn, job_id, attempt)
        return delivery

    async def _bury(self, conn: Conn, job_id: int, attempts: int) -> None:
        """Dead, unrun: every attempt was started by a consumer that died before settling it."""
        try:
            with translated("postgres bury"):
                await conn.execute(self._sql["txn_bury"], {"id": job_id, "attempts": attempts})
                await conn.commit()
        except TransportError as exc:  # rolled back: a later sweep buries it
            self._log.warning("could not dead-letter job %d: %s", job_id, exc)
        else:
            self.buried += 1
            self._log.warning("job %d dead: the consumer died or lost its connection during each "
                              "of its %d attempts", job_id, attempts)
        await self._give_back(conn)

    async def _give_back(self, conn: Conn) -> None:
        """Back to the pool, its transaction ended first (at most once per claim)."""
        if conn not in self._held:
            return
        self._held.discard(conn)
        if conn.info.transaction_status in OPEN:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
        with contextlib.suppress(psycopg.Error):
            await self._pool.putconn(conn)
