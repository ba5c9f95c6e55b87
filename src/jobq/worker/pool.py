"""WorkerPool: N asyncio workers over a bounded buffer, one settle decision, graceful drain.

The facade the commands use: it makes the parts of ``jobq.worker`` (fetch -> execute ->
decide -> settle), holds the one lifecycle state and runs the shutdown order.
"""

from __future__ import annotations

import asyncio
import logging
import time

from jobq.core.errors import TransportError, describe
from jobq.core.job import Delivery, Job
from jobq.core.port import Transport
from jobq.core.within import within
from jobq.worker.bounds import INTERRUPT_GRACE, RELEASE_TIMEOUT, STALL_MARGIN
from jobq.worker.budget import JobBudget
from jobq.worker.capacity import Capacity
from jobq.worker.executor import Executor
from jobq.worker.fetcher import Asking, Fetcher
from jobq.worker.interrupts import Interrupts
from jobq.worker.lifecycle import Lifecycle, State
from jobq.worker.pausing import PauseWatch
from jobq.worker.processor import Handler
from jobq.worker.retry import RetryPolicy
from jobq.worker.settler import Settler
from jobq.worker.stats import PoolObserver, PoolStats
from jobq.worker.threads import HandlerThreads
from jobq.worker.workers import Workers


class WorkerPool:
    """Pulls from a transport only when it has room, runs the handler, settles each delivery once.

    Shutdown order: stop receiving, hand back the unstarted at once (no attempt counted),
    let running jobs finish within ``shutdown_timeout``, interrupt the rest (settled as a
    retryable failure), then return; the caller closes the transport. While ``pause`` says the
    queue is paused: no job starts, the unstarted are handed back, nothing is received.
    """

    def __init__(
        self,
        transport: Transport,
        handler: Handler,
        policy: RetryPolicy,
        *,
        concurrency: int,
        buffer_size: int,
        job_timeout: float | None,
        buffer_max: int = 0,
        shutdown_timeout: float,
        poll_timeout: float = 1.0,
        drain_timeout: float = 0.0,
        once: bool = False,
        stall_timeout: float = 0.0,
        threads: HandlerThreads | None = None,
        observer: PoolObserver | None = None,
        logger: logging.Logger | None = None,
        pause: PauseWatch | None = None,
    ) -> None:
        self._transport, self._pause, self._threads = transport, pause, threads
        log = self._log = logger or logging.getLogger("jobq.pool")
        self._shutdown_timeout = shutdown_timeout
        self._stall_timeout = stall_timeout or (job_timeout or 300.0) + STALL_MARGIN
        self._run_at = time.monotonic()
        self.stats = stats = PoolStats()
        life = self._life = Lifecycle()
        capacity = self._capacity = Capacity(concurrency, buffer_size, buffer_max)
        started_at: dict[int, float] = {}
        holding: list[Delivery | None] = [None] * (concurrency + 1)
        # Job timeouts, operator cancels, the shutdown deadline: what cuts a running handler.
        interrupts = self._interrupts = Interrupts(
            job_timeout=job_timeout, started_at=started_at, holding=holding,
            cancel=self._cancel_worker, health=transport.health, logger=log)
        settler = self._settler = Settler(
            transport, policy, capacity=capacity, holding=holding, stats=stats,
            observer=observer, logger=log, shutdown_timeout=shutdown_timeout)
        self._workers = Workers(
            life=life, capacity=capacity, executor=Executor(handler, interrupts, started_at),
            settler=settler, interrupts=interrupts, holding=holding, started_at=started_at,
            stats=stats, logger=log)
        self._fetcher = Fetcher(
            transport, life=life, capacity=capacity, settler=settler,
            asking=Asking(poll_timeout, drain_timeout, once), pause_watch=pause,
            started_at=started_at, stats=stats, observer=observer, logger=log)
        if pause is not None:
            pause.listen(self._pause_changed)

    @property
    def state(self) -> State:
        """Where the pool is in its life (starting, running, paused, draining, ...)."""
        return self._life.state

    def limit_to(self, budget: JobBudget) -> None:
        """Take no more jobs than ``budget`` has left, then stop (max_jobs_per_process)."""
        self._fetcher.budget = budget

    def job_of(self, task: asyncio.Task[object]) -> Job | None:
        """The job whose handler ``task`` runs now (None: not one of this pool's workers)."""
        return self._workers.job_of(task)

    def running(self) -> list[Job]:
        """The jobs whose handlers run now."""
        return self._workers.running()

    @property
    def in_flight(self) -> int:
        """Deliveries received and not yet settled (running or buffered)."""
        return self._capacity.outstanding

    @property
    def buffered(self) -> int:
        """Deliveries received and waiting for a worker."""
        return self._capacity.queue.qsize()

    @property
    def receive_failures(self) -> int:
        """Consecutive failed receives (readiness)."""
        return self._fetcher.receive_failures

    @property
    def consuming(self) -> bool:
        """False once stopping, or while receives fail (readiness; ``run`` sets stop at its end)."""
        return not self._life.stopped and self.receive_failures == 0

    @property
    def paused(self) -> bool:
        """True while the pool holds back because its queue is paused (``jobq pause``)."""
        return self._life.paused

    @property
    def forced(self) -> bool:
        """True once a second stop signal asked to stop at once."""
        return self._life.forced

    @property
    def workers_alive(self) -> int:
        """Worker tasks currently running (``concurrency`` while the pool runs normally)."""
        return self._workers.alive

    def stalled(self, now: float) -> bool:
        """Jobs are held, and none started or settled for ``stall_timeout`` seconds."""
        if self._capacity.outstanding <= 0 or not self._workers.tasks:
            return False
        # Progress: the last settle, the start of any running handler, or the run's start.
        started = tuple(self._workers.started_at.values())
        last = max(self.stats.last_job_at or 0.0, self._run_at, *started)
        return now - last > self._stall_timeout

    def problem(self, now: float) -> str | None:
        """Why the pool is not live (a dead worker, no progress), or None; read by /healthz."""
        if self._life.stopped or not self._workers.tasks:
            return None  # not started, or stopping: shutdown has its own deadline
        alive, concurrency = self.workers_alive, self._capacity.concurrency
        if alive < concurrency:
            return f"{alive} of {concurrency} workers alive"
        if self.stalled(now):
            return (f"no job started or settled for over {self._stall_timeout:g}s while "
                    f"{self._capacity.outstanding} are held")
        return None

    async def look_at_pause(self) -> None:
        """Before the transport opens: if the queue is paused, the transport opens paused (a
        RabbitMQ consumer then takes no prefetch it would have to hand back)."""
        if self._pause is not None and await self._pause.check():
            await self._transport.quiesce()

    def stop(self) -> None:
        """First call: graceful drain. Second call: stop at once, leaving running jobs unsettled."""
        if self._life.stop():
            self._log.warning("second stop signal: stopping at once")
        self._capacity.room.set()

    async def run(self) -> PoolStats:
        """Run until stopped (or, with ``once``, until nothing is eligible); return the stats."""
        self._run_at = time.monotonic()
        self._life.start()
        self._workers.start()
        fetcher = asyncio.create_task(self._fetcher.fetch())
        stopper = asyncio.create_task(self._life.stopping.wait())
        watchdog = asyncio.create_task(self._interrupts.watch_timeouts())
        cancels = asyncio.create_task(self._interrupts.watch_cancels())
        pauses = asyncio.create_task(self._pause.run() if self._pause else asyncio.sleep(0))
        try:
            await asyncio.wait({fetcher, stopper}, return_when=asyncio.FIRST_COMPLETED)
            self._life.drain()
            fetcher.cancel()  # receive() is cancel-safe: an idle wait may last poll_interval
            await asyncio.gather(fetcher, return_exceptions=True)
            if self._fetcher.handback is not None:  # a pause's hand-back the cancel did not stop
                await asyncio.gather(self._fetcher.handback, return_exceptions=True)
            crashed = None if fetcher.cancelled() else fetcher.exception()
            if crashed is not None:
                # Not a TransportError (those are retried): a bug. Drain what we hold, then fail
                # loudly instead of exiting 0 as if stopped on purpose.
                self._log.error("receiving failed unexpectedly (%s); stopping", describe(crashed))
            await self._release_unstarted()
            await self._drain()
            if crashed is not None:
                raise crashed
        finally:
            self._life.close()
            workers = self._workers.tasks
            for task in (stopper, watchdog, cancels, pauses, *workers, fetcher):
                task.cancel()
            await asyncio.gather(*workers, fetcher, stopper, watchdog, cancels, pauses,
                                 return_exceptions=True)
            if self._threads is not None:
                self._threads.shutdown()
        return self.stats

    def _cancel_worker(self, slot: int) -> None:
        self._workers.cancel(slot)

    def _pause_changed(self, paused: bool) -> None:
        self._life.pause_changed(paused)
        if not paused:  # a pause over before the fetcher saw it: what workers held back runs
            self._capacity.let_held_back_run()
        # The fetcher looks again (a wait for room, a wait in its hold), and so does a run
        # alone waiting for the others.
        self._capacity.wake()

    async def _release_unstarted(self) -> None:
        """The pool's unstarted and what the transport took ahead, handed back side by side,
        so within one RELEASE_TIMEOUT (the shutdown bound counts one)."""
        await asyncio.gather(self._transport_stopping(),
                             self._settler.release(self._capacity.unstarted(), "stopping"))

    async def _transport_stopping(self) -> None:
        try:
            await within(self._transport.quiesce(), min(RELEASE_TIMEOUT, self._shutdown_timeout))
        except (TransportError, TimeoutError) as exc:  # close() lets go of it in the end
            self._log.warning("the transport could not hand back what it took ahead (%s)",
                              describe(exc) if isinstance(exc, TransportError) else "timed out")

    async def _drain(self) -> None:
        self._capacity.stop_workers()
        if await self._workers.wait(self._shutdown_timeout):
            return
        self._log.warning("shutdown timeout (%.1fs): interrupting %d running jobs",
                          self._shutdown_timeout, len(self._workers.started_at))
        self._interrupts.interrupt_all()
        # A plain-def handler's thread cannot be interrupted: its worker waits for it up to
        # INTERRUPT_GRACE, then run() cancels it and the process exits without settling its
        # job (the backend hands it out again). So SIGTERM ends a consumer within
        # shutdown_timeout + INTERRUPT_GRACE (+ closing the transport).
        await self._workers.wait(INTERRUPT_GRACE)
