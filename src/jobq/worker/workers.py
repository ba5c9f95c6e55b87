"""The pool's worker tasks: each takes a delivery, has it executed, then settled.

A worker that ends other than by the stop sentinel is logged and replaced, and the job it
held is settled as ``WorkerDied`` by its replacement (supervision).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from jobq.core.errors import WorkerDied, describe
from jobq.core.job import Delivery, Job
from jobq.worker.capacity import Capacity
from jobq.worker.executor import Executor
from jobq.worker.interrupts import Interrupts
from jobq.worker.lifecycle import Lifecycle
from jobq.worker.settler import Settler
from jobq.worker.stats import PoolStats


class Workers:
    """``concurrency`` worker tasks over ``capacity.queue``, supervised.

    ``holding`` (slot -> the delivery its worker took and has not settled; the extra last
    entry is the scratch slot of settles made outside a worker) and ``started_at`` (slot ->
    monotonic start of its handler) are shared with the executor, the settler and the
    interrupts, which were made with them.
    """

    def __init__(self, *, life: Lifecycle, capacity: Capacity, executor: Executor,
                 settler: Settler, interrupts: Interrupts, holding: list[Delivery | None],
                 started_at: dict[int, float], stats: PoolStats,
                 logger: logging.Logger) -> None:
        self._life = life
        self._capacity = capacity
        self._executor = executor
        self._settler = settler
        self._interrupts = interrupts
        self._holding = holding
        self.started_at = started_at
        self._stats = stats
        self._log = logger
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def alive(self) -> int:
        """Worker tasks currently running."""
        return sum(not w.done() for w in tuple(self.tasks))

    def job_of(self, task: asyncio.Task[object]) -> Job | None:
        """The job whose handler ``task`` (one of the workers) runs now, if any."""
        for slot, worker in enumerate(tuple(self.tasks)):
            if worker is task:
                delivery = self._holding[slot]
                return delivery.job if delivery is not None and slot in self.started_at else None
        return None

    def running(self) -> list[Job]:
        """The jobs whose handlers run now (read from any thread: a snapshot)."""
        return [d.job for slot in tuple(self.started_at) if (d := self._holding[slot]) is not None]

    def start(self) -> None:
        """Start one worker per slot."""
        self.tasks = [self._spawn(i) for i in range(self._capacity.concurrency)]

    def cancel(self, slot: int) -> None:
        """Cancel ``slot``'s worker task (an interrupt of the handler it runs)."""
        self.tasks[slot].cancel()

    def _spawn(self, slot: int, orphan: Delivery | None = None,
               cause: BaseException | None = None) -> asyncio.Task[None]:
        work = self._work(slot) if orphan is None else self._recover(slot, orphan, cause)
        task = asyncio.create_task(work, name=f"jobq-worker-{slot}")
        task.add_done_callback(functools.partial(self._ended, slot))
        return task

    def _ended(self, slot: int, task: asyncio.Task[None]) -> None:
        """Supervision: a worker that ends other than by the stop sentinel is logged and replaced."""
        if self._life.left or self.tasks[slot] is not task:
            return
        cause = None if task.cancelled() else task.exception()
        if cause is None and not task.cancelled():
            return  # read the stop sentinel
        orphan, self._holding[slot] = self._holding[slot], None
        self.started_at.pop(slot, None)
        self._interrupts.forget(slot)
        self._stats.worker_deaths += 1
        self._log.error("worker %d died (%s)%s; starting a new one", slot,
                        "cancelled" if cause is None else describe(cause),
                        f" holding job {orphan.job.id}" if orphan else "", exc_info=cause)
        self.tasks[slot] = self._spawn(slot, orphan, cause)

    async def _recover(self, slot: int, orphan: Delivery, cause: BaseException | None) -> None:
        """Settle the job the dead worker held (as a failure of the attempt), then work on."""
        what = "was cancelled" if cause is None else f"died: {describe(cause)}"
        await self._settler.settle(orphan, WorkerDied(f"the worker running the job {what}"),
                                   0.0, slot)
        await self._work(slot)

    async def _work(self, slot: int) -> None:
        queue, life, holding = self._capacity.queue, self._life, self._holding
        execute = self._executor.execute
        task = asyncio.current_task()
        assert task is not None
        while True:
            delivery = await queue.get()
            if delivery is None:
                return
            if not life.may_start:  # one attribute read per job; the rest only when it is False
                if life.forced:
                    return
                # Not started: handed back with the rest (the fetcher's hold, or at a stop: a
                # worker freed between the stop and the hand-back starts nothing new), or run
                # at resume.
                self._capacity.held_back.append(delivery)
                continue
            if delivery.lapsed is not None and delivery.lapsed(delivery):
                await self._settler.lapsed(delivery)
                continue
            holding[slot] = delivery
            started = time.monotonic()
            error = await execute(slot, delivery, started, task)
            await self._settler.settle(delivery, error, time.monotonic() - started, slot)

    async def wait(self, timeout: float) -> bool:
        """Wait for the workers (and any replacement) to finish; False on timeout or forced stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        forced = asyncio.ensure_future(self._life.forcing.wait())
        try:
            while not self._life.forced:
                pending = {w for w in self.tasks if not w.done()}
                left = deadline - loop.time()
                if not pending or left <= 0:
                    return not pending
                await asyncio.wait({*pending, forced}, timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)
            return False
        finally:
            forced.cancel()
