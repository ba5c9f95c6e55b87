"""PostgreSQL transport, lease mode: batch claims with SKIP LOCKED, batched acks, heartbeats.

A claim commits at once and marks its rows ``running`` with a lease; the lease is extended
while this consumer holds the job, and any consumer frees expired leases (rescue). Idle
consumers sleep on LISTEN and poll as a fallback (delayed retries never notify).
Every write after the claim is fenced to that claim (``held.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.backoff import Backoff
from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.errors import ConnectionLost, TransportError, describe
from jobq.job import Decision, Delivery
from jobq.transport import Health
from jobq.transports.common import carry_out
from jobq.transports.postgres.admin import require_schema
from jobq.transports.postgres.cancels import CancelWatch
from jobq.transports.postgres.connect import consumer_id, pooled
from jobq.transports.postgres.cursor import ClaimCursor, Key
from jobq.transports.postgres.decode import row_to_delivery
from jobq.transports.postgres.held import Held, Lease, pairs
from jobq.transports.postgres.idle import idle_wait
from jobq.transports.postgres.listen import listen
from jobq.transports.postgres.retention import Pruner, consumer_needs, start
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.text import storable
from jobq.within import within

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
# What a lease-mode consumer does to its tables (docs/security.md); queues: the pause watch.
# cancels: operators' requests to stop a running job (`jobq jobs cancel`).
NEEDS = {"jobs": "SELECT,UPDATE", "queues": "SELECT", "cancels": "SELECT,DELETE"}


class PostgresTransport:
    """Lease-mode consumer of one queue in a jobq schema."""


    def __init__(
        self,
        pool: Pool,
        settings: PostgresConfig,
        connect: ConnectConfig,
        *,
        queue: str,
        logger: logging.Logger | None = None,
        limits: LimitsConfig | None = None,
        pruner: Pruner | None = None,
    ) -> None:
        self._pool = pool
        self._pruner = pruner  # runs only with postgres.retention set; counts either way
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        self._q = Queries(settings.schema)
        # Statements rendered to bytes once: psycopg then finds their parsed form in its cache
        # instead of composing the identifiers and re-parsing the text on every execute.
        self._rendered: dict[str, bytes] = {}
        self._log = logger or logging.getLogger("jobq.postgres")
        self._worker = consumer_id()
        self._wake = asyncio.Event()
        self._releasing: list[Lease] = []  # releases waiting for the statement that writes them
        self._released: asyncio.Future[None] | None = None  # the batch's statement, written
        self._claims = itertools.count(1)  # numbers this consumer's claims: their tokens
        self._cursor = ClaimCursor()  # where the next claim starts (cursor.py)
        self._held = Held()  # claimed by us and not yet settled in the database (or lost)
        self._acks: list[Lease] = []
        self._acks_waiting = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Which held jobs an operator cancelled: one probe a second of a table that is empty
        # unless an operator just asked.
        self._cancels = CancelWatch(functools.partial(self._run, fetch=True), self._held.ids,
                                    self._log)
        self.rescued = 0  # expired leases freed by this consumer
        self.reconnects = 0  # LISTEN and pool connections regained after a loss
        self.stale = 0  # outcomes not written: the job's lease had expired
        self.leases_lost = 0  # jobs a heartbeat found rescued from under this consumer
        self._lost = False

    def health(self) -> Health:
        """Connected but from a lost connection until a statement succeeds again; rescued
        leases, reconnects, stale settles, lost leases and pruned jobs (exported as metrics)."""
        return Health(not self._lost, {
            "rescued": self.rescued, "reconnects": self.reconnects, "stale": self.stale,
            "leases_lost": self.leases_lost, **(self._pruner.counters() if self._pruner else {})},
            self._cancels.ids)

    async def open(self) -> None:
        """Rescue expired leases once, then start the ack flusher, the heartbeat/rescue loop and
        (unless poll-only) the listener. Rescuing first lets a ``--once`` sweep pick up the jobs
        of a consumer that died. With ``postgres.retention`` set, the pruner runs too."""
        await require_schema(functools.partial(self._run, fetch=True), self._cfg.schema,
                             *consumer_needs(NEEDS, "a consumer", self._pruner))
        await self._rescue()
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="jobq-pg-acks"))
        self._tasks.append(asyncio.create_task(self._maintain(), name="jobq-pg-lease"))
        self._tasks.append(asyncio.create_task(self._cancels.run(), name="jobq-pg-cancels"))
        self._tasks.extend(start(self._pruner))
        if self._cfg.notify:
            self._tasks.append(asyncio.create_task(self._listen(), name="jobq-pg-listen"))

    async def close(self) -> None:
        """Stop background work and flush the acks still waiting."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        with contextlib.suppress(TransportError):
            await self._flush()
        if self._acks:
            self._log.error("%d acks could not be written; those jobs will run again after "
                            "their lease expires", len(self._acks))

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Claim up to ``max_count`` jobs; if none, wait for a NOTIFY, the next job's due time
        or the poll interval, whichever comes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._wake.clear()
            token, rows = await self._claim(max_count)
            if rows:
                deliveries = [row_to_delivery(row, self._queue, self._limits) for row in rows]
                for delivery, row in zip(deliveries, rows, strict=True):
                    delivery.handle = (row[0], token)
                return deliveries
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            wait = await idle_wait(self._pool, self._q, self._queue,
                                   min(remaining, self._cfg.poll_interval),
                                   self._cfg.network_deadline)
            with contextlib.suppress(TimeoutError):
                await within(self._wake.wait(), wait)

    async def _claim(self, limit: int) -> tuple[str, list[Any]]:
        """Claim from the cursor, or from the start of the queue (cursor.py says which); a
        claim from the cursor that finds nothing is made again from the start at once."""
        after = self._cursor.start()
        token, rows = await self._claim_from(limit, after)
        self._moved(after, rows, limit)
        if rows or after is None:
            return token, rows
        token, rows = await self._claim_from(limit, None)
        self._moved(None, rows, limit)
        return token, rows

    def _moved(self, after: Key | None, rows: list[Any], limit: int) -> None:
        """Tell the cursor what a claim took; an isolated job claimed alone (the "lone" CTE)
        or jobs with a priority (the "urgent" CTE, taken from the start whatever the cursor)
        say nothing of where the queue stands and leave it as it was."""
        if rows and (rows[0][9] or (len(rows) == 1 and rows[0][7] is True)):
            return
        self._cursor.claimed(after, ((row[8], row[0]) for row in rows), limit)

    async def _claim_from(self, limit: int, after: Key | None) -> tuple[str, list[Any]]:
        token = f"{self._worker}/{next(self._claims)}"
        params = {"queue": self._queue, "limit": limit, "lease": self._cfg.lease, "token": token}
        if after is not None:
            params.update(after_run_at=after[0], after_id=after[1])
        name = "claim" if after is None else "claim_after"
        claim = asyncio.ensure_future(self._run(name, params, fetch=True))
        try:
            rows = await asyncio.shield(claim)
        except asyncio.CancelledError:
            # Cancelled (shutdown) while the claim was in flight: it may still commit, so wait
            # for it and hand its rows straight back, attempt not counted.
            with contextlib.suppress(Exception):
                taken = await claim
                if taken:
                    await self._run("release", {**pairs([(row[0], token) for row in taken]),
                                                "channel": self._q.channel})
            raise
        self._held.claimed(token, (row[0] for row in rows))
        return token, rows

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``)."""
        await carry_out(self, delivery, decision)

    async def _ack(self, delivery: Delivery) -> None:
        """Queue the ack for the next batched flush (at most ``ack_interval`` later)."""
        lease: Lease = delivery.handle
        if not self._held.holds(lease):
            self._stale("ack", 1)
            return
        self._acks.append(lease)
        if len(self._acks) >= self._cfg.ack_batch:
            # A failed flush keeps its ids and re-arms the flusher, which retries with backoff:
            # the ack is not lost, so it must not be reported to the pool as a failed settle.
            with contextlib.suppress(TransportError):
                await self._flush()
        else:
            self._acks_waiting.set()

    async def _retry(self, delivery: Delivery, delay: float, reason: str) -> None:
        """Back to pending with ``run_at`` moved ``delay`` seconds ahead."""
        await self._settle_one("retry", delivery, {"delay": delay, "reason": storable(reason)})

    async def _dead(self, delivery: Delivery, reason: str) -> None:
        """Status dead, ``last_error`` = reason."""
        await self._settle_one("dead", delivery, {"reason": storable(reason)})

    async def quiesce(self) -> None:
        """Nothing to do: a claim takes jobs only when the pool asks (what it holds is the pool's)."""

    async def resume(self) -> None:
        """Nothing to do: the pool's next receive claims again."""

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Status cancelled, ``last_error`` = reason, the request deleted."""
        await self._settle_one("cancel", delivery, {"reason": storable(reason)})

    async def _release(self, delivery: Delivery) -> None:
        """Back to pending at once, attempt not counted, other consumers woken.

        Releases made together (the pool hands back all its unstarted jobs at once at
        shutdown) share one statement: the first waits a loop iteration for the others.
        """
        lease: Lease = delivery.handle
        if not self._held.holds(lease):
            return  # rescued already: pending again, or another claim's
        self._held.settling(lease)
        batch = self._releasing
        batch.append(lease)
        if len(batch) > 1:  # the first of the batch writes it
            assert self._released is not None
            await asyncio.shield(self._released)
            return
        self._released = released = asyncio.get_running_loop().create_future()
        try:
            await asyncio.sleep(0)
            self._releasing = []
            await self._run("release", {**pairs(batch), "channel": self._q.channel})
        except BaseException as exc:
            released.set_exception(exc if isinstance(exc, TransportError)
                                   else TransportError(f"postgres release: {describe(exc)}"))
            released.exception()  # retrieved: no "never retrieved" warning without followers
            raise
        else:
            released.set_result(None)
        finally:
            self._held.let_go(batch)

    async def _settle_one(self, name: str, delivery: Delivery, params: dict[str, Any]) -> None:
        lease: Lease = delivery.handle
        if not self._held.holds(lease):  # a heartbeat found the lease lost: not ours to write
            self._stale(name, 1)
            return
        self._held.settling(lease)
        try:
            rows = await self._run(name, {"id": lease[0], "token": lease[1], **params},
                                   fetch=True)
            if not rows:
                self._stale(name, 1)
        finally:
            # Even when the write failed: a job we stop heartbeating has its lease expire and is
            # rescued (run again). Kept in _held, its lease would be renewed for as long as this
            # consumer lives, and the job would stay 'running' and never end.
            self._held.let_go([lease])

    async def _run(self, name: str, params: dict[str, Any], *, fetch: bool = False) -> list[Any]:
        try:
            async with pooled(self._pool, f"postgres {name}", self._cfg.network_deadline) as conn:
                query = self._rendered.get(name)
                if query is None:
                    query = self._rendered[name] = self._q[name].as_bytes(conn)
                cur = await conn.execute(query, params)
                rows = await cur.fetchall() if fetch else []
        except ConnectionLost:
            self._lost = True
            raise
        if self._lost:  # the pool got its connections back after a loss
            self._lost = False
            self.reconnects += 1
        return rows

    async def _flush(self) -> None:
        if not self._acks:
            return
        leases, self._acks = self._acks, []
        self._held.flushing.append(leases)
        try:
            rows = await self._run("ack", pairs(leases), fetch=True)
        except BaseException:
            # Failed or cancelled mid-statement (close() cancels the flush loop): keep them for
            # the next try. Acking twice is harmless; the lease keeps them ours meanwhile.
            # Re-arm the flusher: without it the retry would wait for some later ack, which an
            # idle consumer never gets, and these jobs would stay 'running' for good.
            self._acks[:0] = leases
            self._held.unsure.update(leases)
            self._acks_waiting.set()
            raise
        finally:
            self._held.flushing.remove(leases)
        self._held.let_go(leases)
        if len(rows) < len(leases):  # not all still ours, or acked by a flush that failed late
            stale = set(leases).difference(map(tuple, rows)).difference(self._held.unsure)
            if stale:
                self._stale("ack", len(stale))
        if self._held.unsure:
            self._held.unsure.difference_update(leases)

    def _stale(self, outcome: str, count: int) -> None:
        """Outcomes not written: those jobs' leases expired before they settled."""
        self.stale += count
        self._log.warning(
            "%d %s(s) not written: the job's lease expired before it settled, so it was rescued "
            "and runs again (or is running in another consumer, which writes its outcome); "
            "a handler that blocks the event loop stops the heartbeat (see postgres.lease)",
            count, outcome)

    async def _flush_loop(self) -> None:
        await self._forever(self._flush_once, "ack flush")

    async def _flush_once(self) -> None:
        await self._acks_waiting.wait()
        await asyncio.sleep(self._cfg.ack_interval)
        self._acks_waiting.clear()
        await self._flush()

    async def _maintain(self) -> None:
        await self._forever(self._maintain_once, "lease maintenance")

    async def _maintain_once(self) -> None:
        heartbeat = self._cfg.heartbeat or self._cfg.lease / 3
        await asyncio.sleep(min(heartbeat, self._cfg.rescue_interval))
        if self._held:
            await self._heartbeat()
        await self._rescue()

    async def _heartbeat(self) -> None:
        """Extend our leases; drop the ones found lost (rescued: another claim's now, or pending)."""
        leases = self._held.leases()
        rows = await self._run("heartbeat", {**pairs(leases), "lease": self._cfg.lease},
                               fetch=True)
        if len(rows) == len(leases):
            return
        lost = self._held.drop_lost(leases, map(tuple, rows))
        if lost:
            self.leases_lost += len(lost)
            self._log.warning(
                "lost the lease of %d job(s) (ids %s): no heartbeat for longer than "
                "postgres.lease (%.1fs; a blocked event loop or an unreachable server), so they "
                "were rescued; this consumer stops renewing them and will not write their "
                "outcomes", len(lost), ", ".join(str(job_id) for job_id, _ in lost[:10]),
                self._cfg.lease)

    async def _rescue(self) -> None:
        rows = await self._run("rescue", {"queue": self._queue}, fetch=True)
        if rows:
            dead = sum(1 for _, status in rows if status == "dead")
            self.rescued += len(rows)
            self._log.warning("rescued %d jobs with expired leases (%d of them now dead: "
                              "attempts exhausted)", len(rows), dead)
            self._wake.set()

    async def _forever(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``step`` until cancelled; log failures and back off instead of dying."""
        backoff = Backoff.from_connect(self._connect)
        while True:  # a success starts the count again
            async for attempt in backoff.attempts():
                try:
                    await step()
                    break
                except TransportError as exc:
                    self._log.warning("%s failed (%s); retrying in %.1fs", what, describe(exc),
                                      attempt.delay)

    async def _listen(self) -> None:
        """Hold a LISTEN connection; reconnect forever with backoff if it drops."""
        await listen(self._cfg.dsn, self._connect, self._q.channel, self._queue, self._wake.set,
                     self._log, on_reconnect=self._count_reconnect,
                     network_timeout=self._cfg.network_deadline)

    def _count_reconnect(self) -> None:
        self.reconnects += 1
