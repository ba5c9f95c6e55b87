"""What stops a running handler before it ends: its job timeout, an operator's cancel, the
shutdown deadline. A part of the worker pool (``jobq.worker``).

Each cancels the worker task of the slot that runs the job and marks the slot with why; when
the ``CancelledError`` reaches the worker, it asks whose cancel it was (``timed_out``,
``withdrawn``) and the pool settles the job as that failure. One watchdog serves the whole
pool instead of a timer per job (a per-job ``asyncio.timeout`` costs ~4 us, a tenth of a
no-op job's budget).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from jobq.core.errors import JobTimeout, ShutdownInterrupted, describe
from jobq.core.job import Delivery
from jobq.core.port import Health

CANCEL_LOOK = 0.2  # seconds between looks at which running jobs an operator cancelled


class Interrupts:
    """The pool's watchdog of job timeouts and operator cancels, and the marks they leave.

    ``started_at`` (slot -> monotonic start of its handler) and ``holding`` (slot -> the
    delivery it runs) are the pool's, read here; ``cancel(slot)`` cancels a worker's task.
    """

    def __init__(self, *, job_timeout: float | None, started_at: Mapping[int, float],
                 holding: Sequence[Delivery | None], cancel: Callable[[int], None],
                 health: Callable[[], Health], logger: logging.Logger) -> None:
        self._job_timeout = job_timeout
        self._started_at = started_at
        self._holding = holding
        self._cancel = cancel
        self._health = health
        self._log = logger
        self.expiring: set[int] = set()  # slots the watchdog (or the shutdown) has cancelled
        self.withdrawing: set[int] = set()  # slots cancelled at an operator's request
        self._interrupting = False  # the shutdown deadline passed: running jobs are cut

    async def watch_timeouts(self) -> None:
        """Cancel handlers that overran the job timeout; checks ten times per timeout."""
        if self._job_timeout is None:
            return
        tick = min(1.0, max(0.005, self._job_timeout / 10))
        while True:
            await asyncio.sleep(tick)
            self._expire(time.monotonic() - self._job_timeout)

    def interrupt_all(self) -> None:
        """The shutdown deadline: cancel every running handler (settled ShutdownInterrupted)."""
        self._interrupting = True
        self._expire(float("inf"))

    def _expire(self, started_before: float) -> None:
        for slot, started in list(self._started_at.items()):
            if started <= started_before and slot not in self.expiring:
                self.expiring.add(slot)
                self._cancel(slot)

    async def watch_cancels(self) -> None:
        """Every CANCEL_LOOK while jobs run, look at the jobs the transport knows an operator
        cancelled (a fact it reads about once a second) and cancel those handlers."""
        failing = False
        while True:
            await asyncio.sleep(CANCEL_LOOK)
            if not self._started_at:
                continue
            try:
                cancelled = self._health().cancelled
            except Exception as exc:  # looked at again next time; a bug must not end the looking
                if not failing:
                    self._log.warning("could not look at which running jobs were cancelled (%s)",
                                      describe(exc), exc_info=exc)
                failing = True
                continue
            failing = False
            for slot in list(self._started_at) if cancelled else ():
                delivery = self._holding[slot]
                if (delivery is not None and delivery.job.id in cancelled
                        and slot not in self.expiring and slot not in self.withdrawing):
                    self.withdrawing.add(slot)
                    self._cancel(slot)

    def timed_out(self, slot: int, task: asyncio.Task[object]) -> bool:
        """Whether the cancellation that reached ``slot`` was the watchdog's (and only that)."""
        return _ours(self.expiring, slot, task)

    def withdrawn(self, slot: int, task: asyncio.Task[object]) -> bool:
        """Whether the cancellation that reached ``slot`` was an operator's (and only that)."""
        return _ours(self.withdrawing, slot, task)

    def timeout_error(self) -> BaseException:
        """What a handler cut by the watchdog failed with."""
        if self._interrupting:
            return ShutdownInterrupted("still running at the shutdown deadline")
        return JobTimeout(f"ran longer than the job timeout ({self._job_timeout}s)")

    def forget(self, slot: int) -> None:
        """``slot``'s worker died: a mark it left does not carry over to its replacement."""
        self.expiring.discard(slot)


def _ours(marks: set[int], slot: int, task: asyncio.Task[object]) -> bool:
    """Whether the cancellation that reached ``slot`` was the one ``marks`` records (and only
    that one: a shutdown's on top of it is not uncancelled)."""
    if slot not in marks:
        return False
    marks.discard(slot)
    return task.uncancel() == 0
