"""The pool's decision for a lease-mode job, carried out fenced to its claim
(``common.carry_out`` calls these).

- ack: queued for the next batched flush (lease_acks.py);
- retry, dead, cancelled: one statement each, at once; a job whose lease was found lost is
  not ours to write (counted stale);
- release: back to pending, attempt not counted, other consumers woken; releases made
  together (the pool hands back all its unstarted jobs at once at shutdown) share one
  statement.

Whether its write succeeded or not, a settled job is no longer held: a job this consumer
stops heartbeating has its lease expire and is rescued (run again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from jobq.core.attempts import AttemptError
from jobq.core.errors import TransportError, describe
from jobq.core.job import Delivery
from jobq.transports.postgres.held import Lease, pairs
from jobq.transports.postgres.lease_acks import Acks
from jobq.transports.postgres.lease_run import Statements
from jobq.transports.postgres.lease_state import LeaseState
from jobq.transports.postgres.text import error_json, storable


class LeaseSettler:
    """Carries out each of the five decisions, fenced to the claim (``common.Settles``)."""

    def __init__(self, statements: Statements, state: LeaseState, acks: Acks, *, channel: str,
                 logger: logging.Logger) -> None:
        self._statements = statements
        self._state = state
        self._acks = acks
        self._channel = channel
        self._log = logger
        self._releasing: list[Lease] = []  # releases waiting for the statement that writes them
        self._released: asyncio.Future[None] | None = None  # the batch's statement, written

    def _ack(self, delivery: Delivery) -> Coroutine[Any, Any, None]:
        """Queue the ack for the next batched flush (at most ``ack_interval`` later): the
        batch's own coroutine, not one wrapped around it."""
        return self._acks.add(delivery.handle)

    async def _retry(self, delivery: Delivery, delay: float, reason: str,
                     error: AttemptError | None) -> None:
        """Back to pending with ``run_at`` moved ``delay`` seconds ahead, ``error`` kept."""
        await self._settle_one("retry", delivery, {"delay": delay, "reason": storable(reason),
                                                   "error": error_json(error)})

    async def _dead(self, delivery: Delivery, reason: str, error: AttemptError | None) -> None:
        """Status dead, ``last_error`` = reason, ``error`` kept."""
        await self._settle_one("dead", delivery, {"reason": storable(reason),
                                                  "error": error_json(error)})

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Status cancelled, ``last_error`` = reason, the request deleted."""
        await self._settle_one("cancel", delivery, {"reason": storable(reason)})

    async def _release(self, delivery: Delivery) -> None:
        """Back to pending at once, attempt not counted, other consumers woken.

        Releases made together (the pool hands back all its unstarted jobs at once at
        shutdown) share one statement: the first waits a loop iteration for the others.
        """
        lease: Lease = delivery.handle
        held = self._state.held
        if not held.holds(lease):
            return  # rescued already: pending again, or another claim's
        held.settling(lease)
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
            await self._statements.run("release", {**pairs(batch), "channel": self._channel})
        except BaseException as exc:
            released.set_exception(exc if isinstance(exc, TransportError)
                                   else TransportError(f"postgres release: {describe(exc)}"))
            released.exception()  # retrieved: no "never retrieved" warning without followers
            raise
        else:
            released.set_result(None)
        finally:
            self._state.let_go(batch)

    async def _settle_one(self, name: str, delivery: Delivery, params: dict[str, Any]) -> None:
        lease: Lease = delivery.handle
        held = self._state.held
        if not held.holds(lease):  # a heartbeat found the lease lost: not ours to write
            self._state.stale_outcomes(name, 1, self._log)
            return
        held.settling(lease)
        try:
            rows = await self._statements.run(name, {"id": lease[0], "token": lease[1], **params},
                                              fetch=True)
            if not rows:
                self._state.stale_outcomes(name, 1, self._log)
        finally:
            # Even when the write failed: a job we stop heartbeating has its lease expire and is
            # rescued (run again). Kept among those held, its lease would be renewed for as long
            # as this consumer lives, and the job would stay 'running' and never end.
            self._state.let_go([lease])
