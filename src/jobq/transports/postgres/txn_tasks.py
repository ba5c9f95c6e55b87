"""A transaction-mode consumer's claim tasks: picks, takes and hand-backs under way.

Each runs as a task of its own, which a receive waits for before it reports "nothing", and
which close() and a --once drain wait for; what each brings (a delivery, or an error) goes to
the shared state here: a job taken, to those ready for the next receive (or back, if a pause
or a stop began since its take did); a failed claim, raised by the receive once nothing else
is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from jobq.core.job import Delivery
from jobq.transports.postgres.claims import Row
from jobq.transports.postgres.txn_hold import Holdings
from jobq.transports.postgres.txn_state import TxnState

Work = Coroutine[Any, Any, Delivery | None]


class ClaimTasks:
    """The claim tasks under way, and what becomes of what each brings."""

    __slots__ = ("_hold", "_log", "_state", "claiming")

    def __init__(self, state: TxnState, hold: Holdings, logger: logging.Logger) -> None:
        self._state = state
        self._hold = hold
        self._log = logger
        self.claiming: set[asyncio.Task[Delivery | None]] = set()

    def __len__(self) -> int:
        return len(self.claiming)

    def __bool__(self) -> bool:
        return bool(self.claiming)

    def spawn(self, claim: Work) -> None:
        """Run ``claim`` as a claim task."""
        task = asyncio.create_task(claim)
        self.claiming.add(task)
        task.add_done_callback(self._claimed)

    def _claimed(self, task: asyncio.Task[Delivery | None]) -> None:
        state = self._state
        self.claiming.discard(task)
        state.claim_done.set()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.debug("claim failed: %s", error)
            state.error = state.error or error  # the pool logs it and backs off
        elif (delivery := task.result()) is not None:
            self.hand_over(delivery)

    def hand_over(self, delivery: Delivery) -> None:
        """A job just taken, to those ready for the next receive; put back instead if a pause
        or a stop began since its take did (quiesce hands back only what is ready by then).
        Closing, close() puts back what is ready once its claims are over."""
        if self._state.paused and not self._state.closing:
            self.spawn(self._put_back_unready(delivery))
        else:
            self._state.ready.append(delivery)

    def hand_back(self, rows: list[Row], why: str) -> None:
        """``Holdings.untake`` of picked jobs, as a claim task: free for others now."""
        self.spawn(self.handing_back(rows, why))

    async def handing_back(self, rows: list[Row], why: str) -> Delivery | None:
        """``Holdings.untake`` of the jobs of ``rows`` (a claim task's work; None)."""
        await self._hold.untake([int(row[0]) for row in rows], why)
        return None

    async def _put_back_unready(self, delivery: Delivery) -> Delivery | None:
        """``Holdings.put_back`` as a claim task (which close() waits for)."""
        await self._hold.put_back(delivery.handle)
        return None

    async def wait(self, timeout: float) -> None:
        """Until the claim tasks under way end (a round trip: what they locked is handed
        back), or ``timeout``."""
        if self.claiming:
            await asyncio.wait(self.claiming, timeout=timeout)
