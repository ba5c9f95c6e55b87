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

This module is the façade (the port's seven calls: open, close, receive, settle, quiesce,
resume, health); the parts, each a module, share one ``txn_state.TxnState``:

- txn_schedule.py: the claim scheduler: picks and takes only for free worker slots; it owns
  the jobs picked ahead, kept in a generic timed buffer (timed.py) and handed back unasked;
- txn_take.py: the takes, each job locked in a transaction of its own (or with an ack's
  COMMIT), and the deliveries they make;
- txn_tasks.py: the claim tasks under way, and what becomes of what each brings;
- txn_hold.py: the connections held with a job's transaction, the jobs picked, hand-backs;
- txn_settle.py: the pool's decisions carried out in the job's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.core.job import Decision, Delivery
from jobq.core.port import Health
from jobq.core.within import within
from jobq.transports.common import carry_out
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.cancels import CancelWatch
from jobq.transports.postgres.claims import ClaimStatement, Conn, Sweep
from jobq.transports.postgres.connect import consumer_id, taken, translated
from jobq.transports.postgres.idle import idle_wait
from jobq.transports.postgres.joined import Joined
from jobq.transports.postgres.listen import listen
from jobq.transports.postgres.retention import Pruner, consumer_needs, start
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.txn_hold import Holdings
from jobq.transports.postgres.txn_schedule import Scheduler
from jobq.transports.postgres.txn_settle import TxnSettler
from jobq.transports.postgres.txn_state import TxnState
from jobq.transports.postgres.txn_take import Taker
from jobq.transports.postgres.txn_tasks import ClaimTasks

Pool = AsyncConnectionPool[Conn]
# docs/security.md; queues: the pause watch; cancels: operators' requests (`jobq jobs cancel`)
NEEDS = {"jobs": "SELECT,UPDATE", "queues": "SELECT", "cancels": "SELECT,DELETE"}


class PgTransactionTransport:
    """Transaction-mode consumer of one queue: one connection and transaction per running job."""

    def __init__(self, pool: Pool, settings: PostgresConfig, connect: ConnectConfig, *, queue: str,
                 concurrency: int, once: bool = False, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None, max_attempts: int = 5,
                 pruner: Pruner | None = None) -> None:
        self._pool = pool
        self._pruner = pruner  # runs only with postgres.retention set; counts either way
        limits = limits or LimitsConfig()
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        self._concurrency = concurrency
        self._once = once
        queries = self._queries = Queries(settings.schema)
        log = self._log = logger or logging.getLogger("jobq.postgres")
        worker = consumer_id()
        claim = ClaimStatement(queries, log, worker)
        state = self._state = TxnState(concurrency)
        hold = Holdings(pool, queries, state, worker, log)
        tasks = self._claims = ClaimTasks(state, hold, log)
        # job.context.enqueue: follow-up jobs that commit with the job's ack
        taker = Taker(pool, claim, state=state, hold=hold, tasks=tasks, queue=queue, limits=limits,
                      joined=Joined(queries, queue, max_attempts, limits), logger=log)
        self._schedule = Scheduler(pool, claim, state=state, hold=hold, tasks=tasks, taker=taker,
                                   queue=queue, concurrency=concurrency,
                                   pick_ahead=settings.pick_ahead)
        self._settler = TxnSettler(pool, queries, state=state, hold=hold, schedule=self._schedule,
                                   taker=taker, worker=worker, logger=log)
        self._tasks: list[asyncio.Task[None]] = []
        # Which running jobs an operator cancelled, asked on a pool connection of its own.
        self._cancels = CancelWatch(pool_fetch(pool, queries, settings.network_deadline),
                                    lambda: state.out, log)

    def health(self) -> Health:
        """Always connected: each job holds its own connection, and a lost one fails that job's
        settle or the next claim, which the pool reports (``consuming``). Jobs buried unrun
        and jobs pruned (exported as metrics)."""
        return Health(True, {"buried": self._settler.buried,
                             **(self._pruner.counters() if self._pruner else {})},
                      self._cancels.ids)

    async def open(self) -> None:
        """Check and open the connections the workers will hold; fix a --once sweep's end."""
        size = self._pool.max_size
        need = self._concurrency + 1  # one per running job, one for picks and the depth gauge
        slots = self._state.slots = max(1, min(self._concurrency, size - 1))
        if size < need:
            self._log.warning(
                "postgres.pool_size %d is too small for transaction mode with concurrency %d: "
                "each running job holds a connection, and picks need one more, so at most "
                "%d jobs will run at once; set pool_size to %d or more (0 derives it)",
                size, self._concurrency, slots, need)
        await require_schema(pool_fetch(self._pool, Queries(self._cfg.schema)), self._cfg.schema,
                             *consumer_needs(NEEDS, "a transaction-mode consumer", self._pruner))
        with translated("postgres connect"):
            # Open them all now: a server short of connections fails here, not mid-sweep.
            await self._pool.resize(min_size=size, max_size=size)
            await self._pool.wait(timeout=self._connect.timeout * self._connect.attempts)
        if self._once:  # the jobs due now, and no more: the sweep ends
            with translated("postgres sweep"):
                async with taken(self._pool) as conn:
                    cur = await conn.execute(self._queries["txn_sweep_start"].as_bytes(None))
                    until = (await cur.fetchall())[0][0]
            self._state.sweep = Sweep(until, asyncio.get_running_loop().time())
        if not self._once and self._cfg.notify:
            self._tasks.append(asyncio.create_task(listen(
                self._cfg.dsn, self._connect, self._queries.channel, self._queue,
                self._state.notify, self._log, network_timeout=self._cfg.network_deadline),
                name="jobq-pg-listen"))
        self._tasks.extend(start(self._pruner))
        self._tasks.append(asyncio.create_task(self._cancels.run(), name="jobq-pg-cancels"))
        self._log.info("transaction mode: up to %d jobs at once, each in its own transaction "
                       "(pool of %d connections)", slots, size)

    async def close(self) -> None:
        """Stop claiming and listening; roll back whatever is still held, free the connections."""
        self._state.closing = True
        # No hand-back task starts behind the wait: close hands back every job picked, after
        # its claim tasks end.
        self._schedule.spares.stop()
        # Let them finish (a round trip) so what they locked is handed back.
        await self._claims.wait(self._connect.timeout)
        pending: list[asyncio.Task[Any]] = [*self._tasks, *self._claims.claiming]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        await self._schedule.close()

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Claim up to ``max_count`` jobs, one transaction each; if none, wait for a NOTIFY or poll."""
        state = self._state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            now = loop.time()
            if state.news or (not self._once and now - state.sweep.started_at > self._cfg.poll_interval):
                # Back to the start of the due jobs (no round trip: the cursor is ours). After a
                # NOTIFY: the new jobs may lie behind the cursor (an insert that began before
                # the jobs claimed last, committed after them). Every poll interval: so jobs
                # passed over meanwhile (a rolled-back claim of another consumer) are found.
                state.sweep = Sweep(None, now)
                state.dry = state.news = False
            self._schedule.start_claims(max_count)
            if state.ready:
                handed, state.ready = state.ready[:max_count], state.ready[max_count:]
                state.out.update(delivery.handle.job_id for delivery in handed)
                return handed
            if self._claims:  # never report "nothing" while a claim may still find a job
                state.claim_done.clear()
                await state.claim_done.wait()
                continue
            if state.error is not None:
                error, state.error = state.error, None
                raise error
            remaining = deadline - now
            if remaining <= 0:
                return []
            wait = await idle_wait(self._pool, self._queries, self._queue,
                                   min(remaining, self._cfg.poll_interval),
                                   self._cfg.network_deadline)
            with contextlib.suppress(TimeoutError):
                await within(state.wake.wait(), wait)
            state.dry = False

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``)."""
        await carry_out(self._settler, delivery, decision)

    async def resume(self) -> None:
        """Pick and take with acks' COMMITs again."""
        self._state.paused = False

    async def quiesce(self) -> None:
        """Hand back the jobs picked ahead, and those taken and not yet handed out (a take
        with an ack's COMMIT, or one for a worker the pause keeps idle), and take no more with
        the acks of the jobs still running: a pick takes jobs only when the pool asks, and it
        does not while paused or stopping."""
        self._state.paused = True
        await self._schedule.quiesce()
