"""PostgreSQL transport, lease mode: batch claims with SKIP LOCKED, batched acks, heartbeats.

A claim commits at once and marks its rows ``running`` with a lease; the lease is extended
while this consumer holds the job, and any consumer frees expired leases (rescue). Idle
consumers sleep on LISTEN and poll as a fallback (delayed retries never notify).
Every write after the claim is fenced to that claim (``held.py``).

This module is the façade (the port's seven calls); the parts, each a module, share one
``lease_state.LeaseState`` (the leases held, the counts, the wake-up):

- lease_run.py: the statements, each on a pool connection within the network deadline;
- lease_claim.py: the claims, from the cursor or the start of the queue, each with a token;
- lease_acks.py: the acks, batched, and the flusher's steps;
- lease_settle.py: the pool's decisions carried out, fenced to the claim;
- lease_upkeep.py: the heartbeat and the rescue, run for ever with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Coroutine
from typing import Any

from jobq.config import ConnectConfig, LimitsConfig, PostgresConfig
from jobq.core.errors import TransportError
from jobq.core.job import Decision, Delivery
from jobq.core.port import Health
from jobq.core.within import within
from jobq.transports.common import carry_out
from jobq.transports.postgres.admin import require_schema
from jobq.transports.postgres.cancels import CancelWatch
from jobq.transports.postgres.connect import consumer_id
from jobq.transports.postgres.idle import idle_wait
from jobq.transports.postgres.lease_acks import Acks
from jobq.transports.postgres.lease_claim import Claimer
from jobq.transports.postgres.lease_run import Pool, Statements
from jobq.transports.postgres.lease_settle import LeaseSettler
from jobq.transports.postgres.lease_state import LeaseState
from jobq.transports.postgres.lease_upkeep import Upkeep, forever
from jobq.transports.postgres.listen import listen
from jobq.transports.postgres.retention import Pruner, consumer_needs, start
from jobq.transports.postgres.sql import Queries

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
        self._cfg = settings
        self._connect = connect
        self._queue = queue
        queries = self._q = Queries(settings.schema)
        log = self._log = logger or logging.getLogger("jobq.postgres")
        state = self._state = LeaseState(lease=settings.lease)
        statements = self._statements = Statements(pool, queries, state, settings.network_deadline)
        self._claimer = Claimer(statements, state, worker=consumer_id(), queue=queue,
                                lease=settings.lease, channel=queries.channel,
                                limits=limits or LimitsConfig())
        self._acks = Acks(statements, state, interval=settings.ack_interval,
                          batch=settings.ack_batch, logger=log)
        self._settler = LeaseSettler(statements, state, self._acks, channel=queries.channel,
                                     logger=log)
        self._upkeep = Upkeep(statements, state, settings, queue=queue, logger=log)
        self._tasks: list[asyncio.Task[None]] = []
        # Which held jobs an operator cancelled: one probe a second of a table that is empty
        # unless an operator just asked.
        self._cancels = CancelWatch(functools.partial(statements.run, fetch=True),
                                    state.held.ids, log)

    @property
    def leases_lost(self) -> int:
        """Jobs a heartbeat found rescued from under this consumer."""
        return self._state.leases_lost

    def health(self) -> Health:
        """Connected but from a lost connection until a statement succeeds again; rescued
        leases, reconnects, stale settles, lost leases and pruned jobs (exported as metrics)."""
        state = self._state
        return Health(not state.lost, {
            "rescued": state.rescued, "reconnects": state.reconnects, "stale": state.stale,
            "leases_lost": state.leases_lost, "acks_not_written": state.acks_not_written,
            **(self._pruner.counters() if self._pruner else {})}, self._cancels.ids)

    async def open(self) -> None:
        """Rescue expired leases once, then start the ack flusher, the heartbeat/rescue loop and
        (unless poll-only) the listener. Rescuing first lets a ``--once`` sweep pick up the jobs
        of a consumer that died. With ``postgres.retention`` set, the pruner runs too."""
        await require_schema(functools.partial(self._statements.run, fetch=True),
                             self._cfg.schema, *consumer_needs(NEEDS, "a consumer", self._pruner))
        await self._upkeep.rescue()
        self._tasks.append(asyncio.create_task(
            forever(self._acks.flush_once, "ack flush", self._connect, self._log),
            name="jobq-pg-acks"))
        self._tasks.append(asyncio.create_task(
            forever(self._upkeep.once, "lease maintenance", self._connect, self._log),
            name="jobq-pg-lease"))
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
            await self._acks.flush()
        if self._acks.waiting:
            self._state.acks_not_written += len(self._acks.waiting)
            self._log.error("%d acks could not be written; those jobs will run again after "
                            "their lease expires", len(self._acks.waiting))

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Claim up to ``max_count`` jobs; if none, wait for a NOTIFY, the next job's due time
        or the poll interval, whichever comes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wake = self._state.wake
        while True:
            wake.clear()
            deliveries = await self._claimer.deliveries(max_count)
            if deliveries:
                return deliveries
            if await self._suspect_acked():
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            wait = await idle_wait(self._pool, self._q, self._queue,
                                   min(remaining, self._cfg.poll_interval),
                                   self._cfg.network_deadline)
            with contextlib.suppress(TimeoutError):
                await within(wake.wait(), wait)

    async def _suspect_acked(self) -> bool:
        """Whether the suspect this consumer ran alone had its ack waiting and it is written
        now. Until it is, no other suspect may be claimed (one at a time: lease_state.py), and
        an idle ``--once`` sweep would end with the other suspects pending."""
        if self._state.suspect not in self._acks.waiting:
            return False
        with contextlib.suppress(TransportError):  # kept for the flusher's next try
            await self._acks.flush()
        return self._state.may_claim_suspect()

    def settle(self, delivery: Delivery, decision: Decision) -> Coroutine[Any, Any, None]:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``; the settle's
        own coroutine, not one wrapped around it: an ack is on every job's path)."""
        return carry_out(self._settler, delivery, decision)

    async def quiesce(self) -> None:
        """Nothing to do: a claim takes jobs only when the pool asks (what it holds is the pool's)."""

    async def resume(self) -> None:
        """Nothing to do: the pool's next receive claims again."""

    async def _listen(self) -> None:
        """Hold a LISTEN connection; reconnect forever with backoff if it drops."""
        await listen(self._cfg.dsn, self._connect, self._q.channel, self._queue,
                     self._state.wake.set, self._log, on_reconnect=self._state.count_reconnect,
                     network_timeout=self._cfg.network_deadline)
