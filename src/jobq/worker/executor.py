"""Runs one delivery's handler and says how it ended: None, or the error it failed with."""

from __future__ import annotations

import asyncio

from jobq.core.errors import HandlerCancelled, JobCancelled
from jobq.core.job import Delivery
from jobq.worker.interrupts import Interrupts
from jobq.worker.processor import Handler


class Executor:
    """Runs handlers for the workers; what cut one short (``Interrupts``) names its failure.

    ``started_at`` (slot -> monotonic start of its handler) is the workers': it holds the
    slots whose handler runs, which the watchdogs and the stall check read.
    """

    def __init__(self, handler: Handler, interrupts: Interrupts,
                 started_at: dict[int, float]) -> None:
        self._handler = handler
        self._interrupts = interrupts
        self._started_at = started_at

    async def execute(self, slot: int, delivery: Delivery, started: float,
                      task: asyncio.Task[None]) -> BaseException | None:
        """Run ``delivery``'s job in ``slot`` (its worker's ``task``), started at ``started``;
        a malformed one, or one with a fact, is not run (the settler decides what it means).
        Re-raises only a cancel of the worker itself (shutdown, a forced stop)."""
        if delivery.malformed is not None or delivery.fact is not None:
            return None
        interrupts, started_at = self._interrupts, self._started_at
        error: BaseException | None = None
        started_at[slot] = started
        try:
            await self._handler(delivery.job)
        except asyncio.CancelledError as exc:
            if interrupts.timed_out(slot, task):
                error = interrupts.timeout_error()
            elif interrupts.withdrawn(slot, task):
                error = JobCancelled("cancelled by an operator (jobq jobs cancel) while it ran")
            elif task.cancelling():
                raise  # ours: shutdown or a forced stop
            else:  # the handler's own (it awaited something cancelled): its failure
                error = HandlerCancelled("CancelledError raised by the handler, not a "
                                         "timeout or shutdown")
                error.__cause__ = exc
        except BaseException as exc:  # whatever a handler raises fails its job only
            error = exc
        finally:
            del started_at[slot]
        if slot in interrupts.expiring:  # cancelled, but the handler swallowed it
            interrupts.timed_out(slot, task)
        if slot in interrupts.withdrawing:  # likewise: it ran to its end, which stands
            interrupts.withdrawn(slot, task)
        return error
