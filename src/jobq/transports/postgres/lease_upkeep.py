"""A lease-mode consumer's upkeep: the heartbeat that extends the leases it holds, and the
rescue of expired leases (any consumer frees those of its queue), every ``lease/3`` or
``rescue_interval``, whichever is shorter; and the loop that runs such a step for ever,
backing off after a failure instead of dying.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from jobq.config import ConnectConfig, PostgresConfig
from jobq.core.errors import TransportError, describe
from jobq.transports.postgres.held import pairs
from jobq.transports.postgres.lease_run import Statements
from jobq.transports.postgres.lease_state import LeaseState


async def forever(step: Callable[[], Awaitable[None]], what: str, connect: ConnectConfig,
                  log: logging.Logger) -> None:
    """Run ``step`` until cancelled; log failures and back off instead of dying."""
    backoff = connect.backoff()
    while True:  # a success starts the count again
        async for attempt in backoff.attempts():
            try:
                await step()
                break
            except TransportError as exc:
                log.warning("%s failed (%s); retrying in %.1fs", what, describe(exc),
                            attempt.delay)


class Upkeep:
    """The heartbeat of the leases held and the rescue of expired ones."""

    def __init__(self, statements: Statements, state: LeaseState, settings: PostgresConfig, *,
                 queue: str, logger: logging.Logger) -> None:
        self._statements = statements
        self._state = state
        self._cfg = settings
        self._queue = queue
        self._log = logger

    async def once(self) -> None:
        """Wait a heartbeat (or rescue) interval, then heartbeat what is held and rescue."""
        heartbeat = self._cfg.heartbeat or self._cfg.lease / 3
        await asyncio.sleep(min(heartbeat, self._cfg.rescue_interval))
        if self._state.held:
            await self._heartbeat()
        await self.rescue()

    async def _heartbeat(self) -> None:
        """Extend our leases; drop the ones found lost (rescued: another claim's now, or pending)."""
        state = self._state
        leases = state.held.leases()
        sent = time.monotonic()
        rows = await self._statements.run(
            "heartbeat", {**pairs(leases), "lease": self._cfg.lease}, fetch=True)
        state.held.renewed(map(tuple, rows), sent)
        if len(rows) == len(leases):
            return
        lost = state.held.drop_lost(leases, map(tuple, rows))
        if lost:
            state.leases_lost += len(lost)
            self._log.warning(
                "lost the lease of %d job(s) (ids %s): no heartbeat for longer than "
                "postgres.lease (%.1fs; a blocked event loop or an unreachable server), so they "
                "were rescued; this consumer stops renewing them and will not write their "
                "outcomes", len(lost), ", ".join(str(job_id) for job_id, _ in lost[:10]),
                self._cfg.lease)

    async def rescue(self) -> None:
        """Free the expired leases of the queue (back to pending, or dead); wake a receive."""
        rows = await self._statements.run("rescue", {"queue": self._queue}, fetch=True)
        if rows:
            dead = sum(1 for _, status in rows if status == "dead")
            self._state.rescued += len(rows)
            self._log.warning("rescued %d jobs with expired leases (%d of them now dead: "
                              "attempts exhausted)", len(rows), dead)
            self._state.wake.set()
