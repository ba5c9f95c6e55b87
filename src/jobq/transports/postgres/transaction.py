"""PostgreSQL transport, transaction mode: the classic SKIP LOCKED sweep, effects exactly once.

Each job runs in the transaction that locked its row; the delivery carries that connection as
``job.context``, wrapped so that it cannot end the transaction (job_connection.py). A pick
takes the next jobs past the sweep's cursor, one per free worker, in a statement that commits
at once (txn_pick). Each job is then taken in one round trip: BEGIN, lock it (marking it done
and counting its start, still uncommitted), SAVEPOINT. Success is a bare COMMIT, so the
handler's writes, the job's ``done`` and its attempt appear together; with jobs picked ahead,
the COMMIT carries the take of the next one on the same connection, for the worker it frees
(one round trip a job, as the loop by hand has four). A failure rolls back to
the savepoint and records itself in the same transaction; a crash rolls everything back, its
count included, and frees the row once the server sees the connection gone (or, within two
seconds of the pick, when those are over); the pick that finds the job so abandoned counts its
start (claims.STALE), so a job that kills its process still uses up its attempts. A job
whose transaction ended without jobq (the handler ended it, or its COMMIT failed) fails like
any other: the ack raises SettleRejected, and the pool's retry or dead-letter is written in a
transaction of its own, fenced to the attempt. Picks may run concurrently; after one found
nothing they ask for one job, doubling as they find as many as they asked for.
docs/claim-modes.md says when to use this mode.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.errors import CommitFailed, JobqError, SettleRejected, TransactionOwned, TransportError
from jobq.job import Decision, Delivery, Spent
from jobq.sizing import BufferSizer
from jobq.transport import Health
from jobq.transports.common import carry_out
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.cancels import CancelWatch
from jobq.transports.postgres.claims import (
    GRACE,
    OPEN,
    PICKED,
    STALE,
    Claim,
    ClaimStatement,
    Conn,
    Row,
    Sweep,
    TakeFailedAfterCommit,
    take_count,
)
from jobq.transports.postgres.connect import consumer_id, translated
from jobq.transports.postgres.decode import row_to_delivery
from jobq.transports.postgres.idle import idle_wait
from jobq.transports.postgres.job_connection import HOW, JobConnection
from jobq.transports.postgres.joined import Joined
from jobq.transports.postgres.listen import listen
from jobq.transports.postgres.retention import Pruner, consumer_needs, start
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.text import storable
from jobq.within import within

Pool = AsyncConnectionPool[Conn]
# docs/security.md; queues: the pause watch; cancels: operators' requests (`jobq jobs cancel`)
NEEDS = {"jobs": "SELECT,UPDATE", "queues": "SELECT", "cancels": "SELECT,DELETE"}
STATEMENTS = ("txn_bury", "txn_unpick", "txn_sweep_start", "txn_fail_apart")
ENDED = ("the handler ended the job's transaction (a COMMIT or ROLLBACK statement through "
         "job.context), so the job's outcome could not commit with it; " + HOW)
# Picking ahead (postgres.pick_ahead, on by default): a pick also picks the jobs the next
# workers to free up will want, as many as were taken in SPARES_HOLD seconds lately; one not
# asked for within SPARE_FOR is handed back, well before its pick's moment (GRACE) lets other
# picks take it.
SPARES_HOLD = 0.25
SPARE_FOR = GRACE / 4
ABORTED = ("the job's transaction was aborted by a statement that failed in the handler, and the "
           "handler returned normally: its writes cannot commit (re-raise database errors)")


class PgTransactionTransport:
    """Transaction-mode consumer of one queue: one connection and transaction per running job."""


    def __init__(self, pool: Pool, settings: PostgresConfig, connect: ConnectConfig, *, queue: str,
                 concurrency: int, once: bool = False, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None, max_attempts: int = 5,
                 pruner: Pruner | None = None) -> None:
        self._pool = pool
        self._pruner = pruner  # runs only with postgres.retention set; counts either way
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        self._concurrency = concurrency
        self._once = once
        queries = self._queries = Queries(settings.schema)
        # job.context.enqueue: follow-up jobs that commit with the job's ack
        self._joined = Joined(queries, queue, max_attempts, self._limits)
        self._channel = queries.channel
        self._sql = {name: queries[name].as_bytes(None) for name in STATEMENTS}
        self._fail_sql = b"; ".join(queries[name].as_bytes(None)
                                    for name in ("txn_undo", "txn_fail", "txn_commit"))
        self._log = logger or logging.getLogger("jobq.postgres")
        self._worker = consumer_id()
        self._claim = ClaimStatement(queries, self._log, self._worker)
        self._held: set[Conn] = set()  # connections whose transaction holds a claimed job
        # Picked, not yet taken: job id -> whether its pick counted its start (STALE).
        self._picked: dict[int, bool] = {}
        # Picked ahead for workers not yet free: (row, loop time of its pick), oldest first.
        self._spares: collections.deque[tuple[Row, float]] = collections.deque()
        self._spare_sizer = BufferSizer(0, concurrency, hold=SPARES_HOLD)
        self._spare_timer: asyncio.TimerHandle | None = None
        self._takes = 0  # jobs taken, the spares' sizer's rate
        self._picking = 0  # picks under way
        self._claiming: set[asyncio.Task[Delivery | None]] = set()
        self._ready: list[Delivery] = []  # claimed for a free worker, not yet handed out
        self._out: set[int] = set()  # the ids of the jobs handed out and not yet settled
        self._error: BaseException | None = None  # a failed claim, raised when nothing else is left
        self._dry = False  # the last claim found nothing: wait for news before claiming again
        self._width = 1  # jobs a pick asks for: 1 after one found nothing, doubled as they find
        self._slots = concurrency
        self._asked = 0  # jobs the picks in flight may bring, beyond one per pick task
        self._sweep = Sweep(None, 0.0)
        self._wake = asyncio.Event()  # a NOTIFY came, or a settle freed a worker slot
        self._news = False  # a NOTIFY came since the sweep began
        self._claim_done = asyncio.Event()  # a claim task finished
        self._tasks: list[asyncio.Task[None]] = []
        # Which running jobs an operator cancelled, asked on a pool connection of its own.
        self._cancels = CancelWatch(pool_fetch(pool, queries, settings.network_deadline),
                                    lambda: self._out, self._log)
        self.buried = 0  # dead-lettered unrun: every attempt's consumer died before settling
        self._paused = False  # no job is taken with an ack's COMMIT while paused or closing
        self._closing = False

    def health(self) -> Health:
        """Always connected: each job holds its own connection, and a lost one fails that job's
        settle or the next claim, which the pool reports (``consuming``). Jobs buried unrun
        and jobs pruned (exported as metrics)."""
        return Health(True, {"buried": self.buried,
                             **(self._pruner.counters() if self._pruner else {})},
                      self._cancels.ids)

    async def open(self) -> None:
        """Check and open the connections the workers will hold; fix a --once sweep's end."""
        size = self._pool.max_size
        need = self._concurrency + 1  # one per running job, one for picks and the depth gauge
        self._slots = max(1, min(self._concurrency, size - 1))
        if size < need:
            self._log.warning(
                "postgres.pool_size %d is too small for transaction mode with concurrency %d: "
                "each running job holds a connection, and picks need one more, so at most "
                "%d jobs will run at once; set pool_size to %d or more (0 derives it)",
                size, self._concurrency, self._slots, need)
        await require_schema(pool_fetch(self._pool, Queries(self._cfg.schema)), self._cfg.schema,
                             *consumer_needs(NEEDS, "a transaction-mode consumer", self._pruner))
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
                self._cfg.dsn, self._connect, self._channel, self._queue, self._notify, self._log,
                network_timeout=self._cfg.network_deadline), name="jobq-pg-listen"))
        self._tasks.extend(start(self._pruner))
        self._tasks.append(asyncio.create_task(self._cancels.run(), name="jobq-pg-cancels"))
        self._log.info("transaction mode: up to %d jobs at once, each in its own transaction "
                       "(pool of %d connections)", self._slots, size)

    async def close(self) -> None:
        """Stop claiming and listening; roll back whatever is still held, free the connections."""
        self._closing = True
        self._drop_stale()  # disarms the spares' timer: no hand-back task starts behind the wait
        if self._claiming:  # let them finish (a round trip) so what they locked is handed back
            await asyncio.wait(self._claiming, timeout=self._connect.timeout)
        pending: list[asyncio.Task[Any]] = [*self._tasks, *self._claiming]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        self._spares.clear()  # their jobs are in _picked, handed back below
        for delivery in self._ready:  # claimed but never handed out: the attempt does not count
            await self._put_back(delivery.handle)
        self._ready.clear()
        for conn in list(self._held):  # a forced stop left jobs running: roll them back
            await self._give_back(conn)
        if self._picked:  # picked, never taken: free them now rather than after the grace
            with contextlib.suppress(TransportError):
                await self._unpick(list(self._picked))

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
                self._out.update(delivery.handle.job_id for delivery in handed)
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
            wait = await idle_wait(self._pool, self._queries, self._queue,
                                   min(remaining, self._cfg.poll_interval),
                                   self._cfg.network_deadline)
            with contextlib.suppress(TimeoutError):
                await within(self._wake.wait(), wait)
            self._dry = False

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``)."""
        await carry_out(self, delivery, decision)

    async def _ack(self, delivery: Delivery) -> None:
        """Commit: the job's done mark and the handler's writes together.

        SettleRejected if they cannot commit; the delivery is then still the pool's to settle.
        """
        claim: Claim = delivery.handle
        rejected = self._unfinished(claim)
        if rejected is None:
            spare = self._chained_spare()
            try:
                if spare is None:
                    await claim.conn.commit()  # txn_take marked it done already
                else:
                    await self._commit_taking(claim, spare)
            except psycopg.Error as exc:
                claim.ended = ("pending",)  # rolled back (or, the link lost, maybe committed)
                rejected = CommitFailed(f"the job's COMMIT failed: {type(exc).__name__}: "
                                        f"{' '.join(str(exc).split())}")
            finally:
                if rejected is None and not claim.let_go:  # not passed on to the next job
                    await self._settled(claim)
        if rejected is not None:
            raise SettleRejected(rejected)

    def _chained_spare(self) -> Row | None:
        """A job picked ahead for the worker this ack frees, to take with the COMMIT (or None)."""
        self._drop_stale()
        free = (self._slots - len(self._out) + 1 - self._asked - len(self._claiming)
                - len(self._ready))
        if (not self._spares or free <= 0 or self._paused or self._closing
                or self._error is not None or not self._claim.chains):
            return None
        row = self._spares.popleft()[0]
        self._refill()
        return row

    def _refill(self) -> None:
        """Once the jobs picked ahead are down to half of what the picks would keep now, and
        no pick is under way, a pick for more (only ahead): the next acks then find one to
        take with their COMMIT, not an empty deque and a pick of their own."""
        if (self._picking or self._dry or 2 * len(self._spares) > self._spare_sizer.size
                or not self._cfg.pick_ahead):
            return
        self._asked -= 1  # the pick's task brings no job for a free worker
        self._spawn_pick(0)

    async def _commit_taking(self, claim: Claim, row: Row) -> None:
        """The job's COMMIT and the take of ``row`` on its connection, in one round trip: the
        take's round trip, and the worker's trip through the pool and a receive, saved per job.
        The taken job waits in ``_ready`` for the receive the freed worker makes next, and the
        claim is let go (``let_go``) without giving its connection back. Raises the COMMIT's
        error only (psycopg.Error); a take that fails after it hands its job back."""
        conn = claim.conn
        try:
            taken = await self._claim.take(conn, row, commit=True)
        except TakeFailedAfterCommit as exc:
            self._log.debug("the take with job %d's COMMIT failed after it: %s", claim.job_id, exc)
            self._spawn(self._hand_back([row], "a failed take"))
            return
        except psycopg.Error:
            self._spawn(self._hand_back([row], "a take with a failed COMMIT"))
            raise
        claim.let_go = True  # its connection is the next job's from here on
        self._out.discard(claim.job_id)
        self._wake.set()
        delivery = await self._taken(conn, row, taken)
        if delivery is not None:
            self._hand_over(delivery)
            self._claim_done.set()

    def _unfinished(self, claim: Claim) -> JobqError | None:
        """Why the job's transaction cannot commit as the job's outcome, if it cannot."""
        status = claim.conn.info.transaction_status
        if status == TransactionStatus.INTRANS:
            return None
        if status == TransactionStatus.INERROR:  # the savepoint is still there: a plain failure
            return CommitFailed(ABORTED)
        claim.ended = ("done", "pending")
        return TransactionOwned(ENDED)

    async def _retry(self, delivery: Delivery, delay: float, reason: str) -> None:
        """Roll the handler's writes back; back to pending, due ``delay`` seconds from now."""
        await self._fail(delivery.handle, "pending", delay, reason)

    async def _dead(self, delivery: Delivery, reason: str) -> None:
        """Roll the handler's writes back; status dead, ``last_error`` = reason. One whose
        attempts were spent before it ran is buried with the attempts its crashes used."""
        if isinstance(delivery.fact, Spent):
            await self._bury(delivery.handle, reason)
            return
        await self._fail(delivery.handle, "dead", 0.0, reason)

    async def resume(self) -> None:
        """Pick and take with acks' COMMITs again."""
        self._paused = False

    async def quiesce(self) -> None:
        """Hand back the jobs picked ahead, and those taken and not yet handed out (a take
        with an ack's COMMIT, or one for a worker the pause keeps idle), and take no more with
        the acks of the jobs still running: a pick takes jobs only when the pool asks, and it
        does not while paused or stopping."""
        self._paused = True
        # Each holds a row lock and an open transaction. Each leaves _ready once put back, so
        # that close() still finds it if a deadline cuts this short (the pool's, at a stop).
        while self._ready:
            delivery = self._ready[0]
            await self._put_back(delivery.handle)
            self._ready = [d for d in self._ready if d is not delivery]
        if self._spares:
            rows = [row for row, _ in self._spares]
            self._spares.clear()
            await self._hand_back(rows)

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Roll the handler's writes back; status cancelled, the request deleted."""
        await self._fail(delivery.handle, "cancelled", 0.0, reason)

    async def _release(self, delivery: Delivery) -> None:
        """Roll back, unlocking the job for others at once; its attempt does not count."""
        async with self._settling(delivery.handle, "release"):
            await self._unstart(delivery.handle)

    async def _fail(self, claim: Claim, status: str, delay: float, reason: str) -> None:
        # Back to the savepoint taken with the claim: the handler's writes are undone, the
        # row stays locked while the failure is written, and all of it is one round trip.
        async with self._settling(claim, {"pending": "retry"}.get(status, status)):
            params = {"id": claim.job_id, "status": status, "delay": delay, "reason": storable(reason)}
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
        await self._let_go(claim)  # its transaction is not the job's (or broken): another
        async with self._pool.connection() as conn:
            cur = await conn.execute(self._sql["txn_fail_apart"], {
                **params, "worker": self._worker, "attempt": claim.attempt, "until": claim.until,
                "states": list(claim.ended)})
        if cur.rowcount == 0:
            self._log.warning("job %d: its failure was not recorded: the job is no longer as its "
                              "attempt %d left it (its COMMIT went through after all, or a pick "
                              "took it since)", claim.job_id, claim.attempt)

    async def _unstart(self, claim: Claim) -> None:
        with translated("postgres release"):
            await claim.conn.rollback()  # the take's count with it, if it made one
            counted = [] if claim.count else [claim.job_id]
            await claim.conn.execute(self._sql["txn_unpick"], {
                "ids": [claim.job_id], "counted": counted, "worker": self._worker})
        await self._let_go(claim)

    async def _unpick(self, ids: list[int]) -> None:
        counted = [job_id for job_id in ids if self._picked.get(job_id)]
        with translated("postgres release"):
            async with self._pool.connection() as conn:
                await conn.execute(self._sql["txn_unpick"], {
                    "ids": ids, "counted": counted, "worker": self._worker})
        for job_id in ids:
            self._picked.pop(job_id, None)

    @contextlib.asynccontextmanager
    async def _settling(self, claim: Claim, what: str) -> AsyncIterator[None]:
        """Driver errors translated; the connection given back and the worker's slot freed after."""
        try:
            with translated(f"postgres {what}"):
                yield
        finally:
            await self._settled(claim)

    async def _settled(self, claim: Claim) -> None:
        self._out.discard(claim.job_id)
        await self._let_go(claim)
        self._wake.set()  # a receive waiting for a free worker slot may go on

    async def _let_go(self, claim: Claim) -> None:
        """The job's connection back to the pool, once: given back, it may be another job's
        before this claim's settle is over (a failure recorded apart gives it back early)."""
        if not claim.let_go:
            claim.let_go = True
            await self._give_back(claim.conn)

    def _notify(self) -> None:
        """A NOTIFY for the queue (or the LISTEN connection is back): new jobs may be due."""
        self._news = True
        self._wake.set()

    def _start_claims(self, max_count: int) -> None:
        """Takes of jobs picked ahead, then a pick, for the free workers that no claim in
        flight is already for."""
        if self._error is not None:
            return
        room = (min(max_count, self._slots - len(self._out)) - self._asked
                - len(self._claiming) - len(self._ready))
        room = self._take_spares(room)
        if self._dry:
            return
        # A queue that is idle, or fed a job at a time, costs about one pick per job, not one
        # per free worker: after a pick found nothing, they ramp up as picks find jobs.
        room = min(room, self._width - self._asked)
        if room <= 0:
            return
        self._wake.clear()  # news from now on is news to the pick started here
        self._asked += room - 1  # the pick's task counts as one of them while it runs
        self._spawn_pick(room)

    def _spawn_pick(self, room: int) -> None:
        self._picking += 1  # from now: two acks in one loop turn must not both refill
        self._spawn(self._pick(room))

    def _take_spares(self, room: int) -> int:
        """Take up to ``room`` jobs picked ahead, in a task each; hand back the stale ones.
        The room left."""
        self._drop_stale()
        while room > 0 and self._spares:
            row, _ = self._spares.popleft()
            self._spawn(self._take(None, row))
            room -= 1
        return room

    def _drop_stale(self) -> None:
        """Hand back the jobs picked ahead more than SPARE_FOR ago (in a claim task, which
        a --once drain and close() wait for); look again when the next one turns stale."""
        if self._spare_timer is not None:
            self._spare_timer.cancel()
            self._spare_timer = None
        if self._closing:  # close() hands back every job picked, after its claim tasks end
            return
        loop = asyncio.get_running_loop()
        now, stale = loop.time(), []
        while self._spares and now - self._spares[0][1] > SPARE_FOR:
            stale.append(self._spares.popleft()[0])
        if stale:
            self._spawn(self._hand_back(stale))
        if self._spares:
            self._spare_timer = loop.call_later(
                self._spares[0][1] + SPARE_FOR - now + 0.01, self._drop_stale)

    async def _hand_back(self, rows: list[Row], why: str = "picked ahead, not asked for"
                         ) -> Delivery | None:
        """``_untake`` of picked jobs, as a claim task (which a --once drain and close() wait
        for): free for others now."""
        await self._untake([int(row[0]) for row in rows], why)
        return None

    def _ahead(self) -> int:
        """How many jobs a pick may pick ahead now (``postgres.pick_ahead``): the takes of
        SPARES_HOLD seconds at the recent rate, less those already picked ahead."""
        if not self._cfg.pick_ahead:
            return 0
        wanted = self._spare_sizer.measure(asyncio.get_running_loop().time(), self._takes)
        return max(0, wanted - len(self._spares))

    def _spawn(self, claim: Coroutine[Any, Any, Delivery | None]) -> None:
        task = asyncio.create_task(claim)
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
            self._hand_over(delivery)

    def _hand_over(self, delivery: Delivery) -> None:
        """A job just taken, to those ready for the next receive; put back instead if a pause
        or a stop began since its take did (quiesce hands back only what is ready by then).
        Closing, close() puts back what is ready once its claims are over."""
        if self._paused and not self._closing:
            self._spawn(self._put_back_unready(delivery))
        else:
            self._ready.append(delivery)

    async def _pick(self, room: int) -> Delivery | None:
        """Pick up to ``room`` jobs past the cursor; take the first here, the others in tasks.
        With ``room`` 0, a refill: only jobs picked ahead."""
        ahead = self._ahead()
        try:
            if not room + ahead:
                return None
            with translated("postgres claim"):
                conn = await self._pool.getconn()
            self._held.add(conn)
            try:
                sweep = self._sweep  # a new sweep may begin while this pick runs
                with translated("postgres claim"):
                    rows = await self._claim.pick(conn, sweep, self._queue, room + ahead)
            except BaseException:
                await self._give_back(conn)
                raise
        finally:
            self._asked -= room - 1
            self._picking -= 1
        if not rows:
            if sweep is self._sweep:  # a sweep begun since (a hand-back, a NOTIFY) is not dry
                self._dry, self._width = True, 1
            await self._give_back(conn)
            return None
        self._picked.update((int(row[0]), bool(row[STALE])) for row in rows)
        for row in rows:
            sweep.passed(row)
        # Jobs found abandoned (their pick counted their starts) go to free workers first (in
        # a refill, to the front of those picked ahead: the next ack takes them): a consumer
        # that died holding one picked ahead would have it charged unrun.
        rows.sort(key=lambda row: not row[STALE])
        rows, spares = rows[:room], rows[room:]
        if room:
            self._width = min(self._slots, self._width * 2) if len(rows) == room else len(rows)
        if spares and (self._paused or self._closing):  # since the pick began: none kept
            self._spawn(self._hand_back(spares, "picked ahead as a pause or a stop began"))
        elif spares:
            now = asyncio.get_running_loop().time()
            self._spares.extend((row, now) for row in spares)
            if self._spare_timer is None:
                self._drop_stale()  # arms the timer
        if not rows:  # a refill
            await self._give_back(conn)
            return None
        for row in rows[1:]:
            self._spawn(self._take(None, row))
        return await self._take(conn, rows[0])

    async def _take(self, conn: Conn | None, row: Row) -> Delivery | None:
        """Lock the picked job of ``row`` in a new transaction on ``conn`` (or one from the pool)."""
        job_id = int(row[0])
        try:
            if conn is None:
                with translated("postgres claim"):
                    conn = await self._pool.getconn()
                self._held.add(conn)
            with translated("postgres claim"):
                taken = await self._claim.take(conn, row)
        except BaseException as exc:
            if conn is not None:
                await self._give_back(conn)
            if isinstance(exc, TransportError):
                await self._untake([job_id], "a failed take")
            raise
        return await self._taken(conn, row, taken)

    async def _taken(self, conn: Conn, row: Row, taken: bool) -> Delivery | None:
        """After the take of ``row`` on ``conn``: its delivery, or None if it was no longer ours."""
        job_id = int(row[0])
        self._picked.pop(job_id, None)
        self._takes += 1
        if not taken:  # picked again since (this take came after the pick's moment): theirs now
            self._log.warning("job %d was picked again before this consumer took it (its take "
                              "came more than %.0f s after its pick: an event loop blocked that "
                              "long?)", job_id, GRACE)
            await self._give_back(conn)
            return None
        return await self._deliver(conn, row)

    async def _put_back(self, claim: Claim) -> None:
        """A taken job that was never handed out, back to the queue unstarted, and the sweep
        begun again (the cursor is past it). Once: a claim let go holds nothing of its own."""
        if claim.let_go:
            return
        with contextlib.suppress(TransportError):
            await self._unstart(claim)
        await self._let_go(claim)
        self._sweep_again()

    async def _put_back_unready(self, delivery: Delivery) -> Delivery | None:
        """``_put_back`` as a claim task (which close() waits for)."""
        await self._put_back(delivery.handle)
        return None

    def _sweep_again(self) -> None:
        """The sweep from the start of the due jobs, and a pick woken: jobs handed back lie
        behind the cursor (a --once sweep would end without them)."""
        self._sweep = Sweep(self._sweep.until, asyncio.get_running_loop().time())
        self._dry = False
        self._wake.set()

    async def _untake(self, ids: list[int], why: str) -> None:
        """Hand picked jobs back with their starts uncounted (a take failed, or they were
        picked ahead and not asked for), and sweep again from the start, since the cursor has
        moved past them (a --once sweep would end without them)."""
        try:
            await self._unpick(ids)
        except TransportError as exc:  # their pick's moment passes and frees them anyway
            self._log.debug("could not hand back jobs %s (%s): %s", ids[:10], why, exc)
        finally:
            # Once they are free, not before: a pick that runs while the hand-back waits for its
            # COMMIT skips them (still locked, still marked picked), finds nothing or moves the
            # cursor past them, and a --once drain would end without them.
            self._sweep_again()

    async def _deliver(self, conn: Conn, row: Row) -> Delivery:
        """The delivery of a taken job; one whose attempts were all used up by crashes (every
        earlier start's consumer died before settling it) goes to the pool with that fact."""
        count = take_count(row)
        job_id, attempt, max_attempts = int(row[0]), int(row[4]) + count, int(row[5])
        spent = attempt > max_attempts
        used = attempt - 1 if spent else attempt  # a start that will not run does not count
        delivery = row_to_delivery((*row[:4], used, *row[5:7]), self._queue, self._limits)
        delivery.job = dataclasses.replace(delivery.job, context=JobConnection(conn, self._joined))
        delivery.handle = Claim(conn, job_id, attempt, count, row[PICKED])
        if spent:
            delivery.fact = Spent(f"the consumer died or lost its connection during each of its "
                                  f"{used} attempts (transaction mode)")
        return delivery

    async def _bury(self, claim: Claim, reason: str) -> None:
        """Dead, unrun, with the attempts its crashed starts used (this take's does not count)."""
        async with self._settling(claim, "dead"):
            await claim.conn.execute(self._sql["txn_bury"], {
                "id": claim.job_id, "attempts": claim.attempt - 1, "reason": storable(reason)})
            await claim.conn.commit()
        self.buried += 1

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
