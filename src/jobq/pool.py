"""WorkerPool: N asyncio workers over a bounded buffer, one settle decision, graceful drain."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable

from jobq.backoff import pause
from jobq.errors import (
    TransportError,
    describe,
)
from jobq.job import (
    Delivery,
)
from jobq.pausing import PauseWatch
from jobq.processor import Handler
from jobq.retry import RetryPolicy
from jobq.threads import HandlerThreads
from jobq.transport import Transport
from jobq.within import within
from jobq.worker.bounds import INTERRUPT_GRACE, RECEIVE_BACKOFF, RELEASE_TIMEOUT, STALL_MARGIN
from jobq.worker.capacity import Capacity
from jobq.worker.executor import Executor
from jobq.worker.interrupts import Interrupts
from jobq.worker.lifecycle import Lifecycle, State
from jobq.worker.settler import Settler
from jobq.worker.stats import PoolObserver, PoolStats
from jobq.worker.workers import Workers

# Where they were defined before jobq.worker: the pool's callers import them from here.
__all__ = ["INTERRUPT_GRACE", "RELEASE_TIMEOUT", "STALL_MARGIN", "PoolObserver", "PoolStats",
           "WorkerPool"]


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
        self._transport = transport
        self._capacity = Capacity(concurrency, buffer_size, buffer_max)
        self._shutdown_timeout = shutdown_timeout
        self._poll_timeout = poll_timeout
        # --once: how long an idle pool's empty receive must wait before "nothing left" is
        # believed (0 for a claim, whose empty answer is the truth; RabbitMQ's DRAIN_TIMEOUT)
        self._drain_timeout = drain_timeout
        self._once = once
        self._observer = observer
        self._log = logger or logging.getLogger("jobq.pool")
        self.stats = PoolStats()
        self._life = Lifecycle()  # the one lifecycle state (and the events a stop sets)
        started_at: dict[int, float] = {}  # slot -> monotonic start of its handler
        holding: list[Delivery | None] = [None] * (concurrency + 1)  # see Workers
        # Job timeouts, operator cancels, the shutdown deadline: what cuts a running handler.
        interrupts = self._interrupts = Interrupts(
            job_timeout=job_timeout, started_at=started_at, holding=holding,
            cancel=self._cancel_worker, health=transport.health, logger=self._log)
        settler = self._settler = Settler(
            transport, policy, capacity=self._capacity, holding=holding, stats=self.stats,
            observer=observer, logger=self._log, shutdown_timeout=shutdown_timeout)
        self._workers = Workers(
            life=self._life, capacity=self._capacity,
            executor=Executor(handler, interrupts, started_at), settler=settler,
            interrupts=interrupts, holding=holding, started_at=started_at, stats=self.stats,
            logger=self._log)
        self._run_at = time.monotonic()
        self._stall_timeout = stall_timeout or (job_timeout or 300.0) + STALL_MARGIN
        self._threads = threads  # shut down at the end of run (the pool's sync handlers' threads)
        self.receive_failures = 0  # consecutive failed receives (readiness)
        self._pause = pause
        self._handback: asyncio.Future[None] | None = None  # the pause's hand-back, in flight
        self._ahead: asyncio.Task[list[Delivery]] | None = None  # the next receive, asked early
        if pause is not None:
            pause.listen(self._pause_changed)

    @property
    def state(self) -> State:
        """Where the pool is in its life (starting, running, paused, draining, ...)."""
        return self._life.state

    @property
    def in_flight(self) -> int:
        """Deliveries received and not yet settled (running or buffered)."""
        return self._capacity.outstanding

    @property
    def buffered(self) -> int:
        """Deliveries received and waiting for a worker."""
        return self._capacity.queue.qsize()

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
        fetcher = asyncio.create_task(self._fetch())
        stopper = asyncio.create_task(self._life.stopping.wait())
        watchdog = asyncio.create_task(self._interrupts.watch_timeouts())
        cancels = asyncio.create_task(self._interrupts.watch_cancels())
        pauses = asyncio.create_task(self._pause.run() if self._pause else asyncio.sleep(0))
        try:
            await asyncio.wait({fetcher, stopper}, return_when=asyncio.FIRST_COMPLETED)
            self._life.drain()
            fetcher.cancel()  # receive() is cancel-safe: an idle wait may last poll_interval
            await asyncio.gather(fetcher, return_exceptions=True)
            if self._handback is not None:  # a pause's hand-back the cancel did not stop
                await asyncio.gather(self._handback, return_exceptions=True)
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
            stopper.cancel()
            watchdog.cancel()
            cancels.cancel()
            pauses.cancel()
            for task in (*workers, fetcher):
                task.cancel()
            await asyncio.gather(*workers, fetcher, stopper, watchdog, cancels, pauses,
                                 return_exceptions=True)
            if self._threads is not None:
                self._threads.shutdown()
        return self.stats

    def _cancel_worker(self, slot: int) -> None:
        self._workers.cancel(slot)

    async def _fetch(self) -> None:
        if self._pause is not None:
            await self._pause.check()  # before the first receive: a paused queue gives nothing
        try:
            await self._fetch_batches()
        finally:
            await self._end_ahead()

    async def _end_ahead(self) -> None:
        """Stopping with a receive started early: cancel it once (a lease claim cancelled twice
        could not hand back what it took) and wait for its end, however often the fetcher is
        cancelled meanwhile; what it brought joins the unstarted, which the stop hands back."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        ahead.cancel()
        interrupted = False
        while not ahead.done():
            try:
                await asyncio.wait({ahead})
            except asyncio.CancelledError:
                interrupted = True
        if not ahead.cancelled() and ahead.exception() is None:
            self._accept(ahead.result())
        if interrupted:
            raise asyncio.CancelledError

    async def _fetch_batches(self) -> None:
        failures = 0
        capacity = self._capacity
        while not self._life.stopped:
            capacity.measure(time.monotonic(), self.stats.settled)
            idle_before = False
            receiving: Awaitable[list[Delivery]]
            if self._ahead is not None:
                # Shielded: a cancel of the fetcher must not drop a batch the receive has
                # already taken; self._ahead stays set until it is in hand (_end_ahead).
                receiving = asyncio.shield(self._ahead)
            else:
                if self._life.paused:
                    if not await self._hold():
                        return
                    continue
                if not await capacity.room_for_a_batch():
                    continue
                idle_before = capacity.outstanding == 0
                receiving = self._transport.receive(
                    capacity.ask(capacity.size - capacity.outstanding),
                    self._receive_timeout(idle_before))
            try:
                batch = await receiving
            except TransportError as exc:
                self._ahead = None
                failures = self.receive_failures = failures + 1
                await self._receive_failed(exc, failures)
                continue
            self._ahead = None
            failures = self.receive_failures = 0
            if not batch:
                if self._once and idle_before:
                    self._log.info("nothing left to do (--once)")
                    return
                continue
            await self._take_in(batch)
            if capacity.isolated:
                await self._run_isolated()

    async def _take_in(self, batch: list[Delivery]) -> None:
        """Hand ``batch`` to the workers, the next receive started first if there is room."""
        self._ahead = self._ask_ahead(batch)
        try:
            if self._ahead is not None:  # one loop turn: its request goes out first
                await asyncio.sleep(0)
        finally:  # in the workers' hands even if cancelled meanwhile: released at stop
            self._accept(batch)

    async def _receive_failed(self, exc: TransportError, failures: int) -> None:
        delay = RECEIVE_BACKOFF.delay(failures)
        self._log.warning("receive failed (%s); retrying in %.1fs", describe(exc), delay)
        await pause(delay, self._life.stopping)

    def _ask_ahead(self, batch: list[Delivery]) -> asyncio.Task[list[Delivery]] | None:
        """Before ``batch`` reaches the workers, start the next receive if the pool has room
        for it beside ``batch``: its round trip to the server then overlaps their work instead
        of following it. Workers whose jobs never wait (no-op jobs, a lease-mode ack) run the
        whole buffer without yielding the event loop, so a receive started after they are
        woken would go out only once the buffer is empty: the caller gives it one loop turn
        first, in which it sends its claim. Not without a buffer (transaction mode: it
        claims only for free workers), not while paused or stopping, nor beside a job that
        must run alone: receiving waits for it (``_run_isolated``)."""
        capacity = self._capacity
        room = capacity.size - capacity.outstanding - len(batch)
        if (capacity.unbuffered or room < capacity.low_water
                or self._life.holds_back or any(delivery.isolate for delivery in batch)):
            return None
        return asyncio.ensure_future(self._transport.receive(capacity.ask(room),
                                                             self._receive_timeout(False)))

    def _accept(self, batch: list[Delivery]) -> None:
        """Take a received batch in: to the workers, isolated ones aside to run alone."""
        if self.stats.first_job_at is None:
            self.stats.first_job_at = time.monotonic()
        self._capacity.accept(batch)
        if self._observer is not None:
            self._observer.gauges(self._capacity.outstanding, self._capacity.queue.qsize())

    async def _run_isolated(self) -> None:
        """Run each isolated delivery alone: after everything else settled, and before more work.

        Receiving stops meanwhile, so that a crash during the run is this job's and no other's.
        Cancelled by shutdown, or ended by a pause, what has not started stays in ``isolated``
        and is released. One already running when the pause came is waited for (the fetcher
        holds meanwhile), so nothing runs beside it after a resume.
        """
        capacity, life = self._capacity, self._life
        while capacity.isolated and not life.paused:
            await capacity.until(lambda: life.paused
                                 or capacity.outstanding == len(capacity.isolated))
            if life.paused:
                return
            delivery = capacity.isolated.pop(0)
            capacity.queue.put_nowait(delivery)
            await capacity.until(functools.partial(self._ran_alone, delivery))

    def _ran_alone(self, delivery: Delivery) -> bool:
        """The run alone of ``delivery`` is over: it settled, or a pause held it back unstarted."""
        capacity = self._capacity
        return capacity.outstanding == len(capacity.isolated) or (
            self._life.paused and any(d is delivery for d in capacity.held_back))

    async def _hold(self) -> bool:
        """While the queue is paused: hand back the unstarted, receive nothing, wait for the
        resume; False when the pool is to stop instead (stopped, or ``--once``)."""
        running = len(self._workers.started_at)
        self._log.warning("queue paused (jobq pause): taking no new jobs until it is resumed; "
                          "%d running finish", running)
        self._handback = asyncio.ensure_future(self._hand_back())
        await asyncio.shield(self._handback)  # a stop meanwhile lets it finish (run() waits)
        self._handback = None
        if self._once:
            self._log.info("the queue is paused: nothing more to do (--once)")
            return False
        while self._life.paused and not self._life.stopped:
            self._capacity.room.clear()  # set by the resume, a stop, and every settle: no spinning
            await self._capacity.room.wait()
        if self._life.stopped:
            return False
        try:
            await self._transport.resume()
        except TransportError as exc:  # its next receive fails or waits as after any loss
            self._log.warning("resuming the transport failed (%s)", describe(exc))
        self._log.info("queue resumed: taking jobs again")
        return True

    async def _hand_back(self) -> None:
        """The transport stops deliveries first (a pushed one would arrive after the release)."""
        try:
            await self._transport.quiesce()
        except TransportError as exc:
            self._log.warning("pausing the transport failed (%s)", describe(exc))
        await self._settler.release(self._capacity.unstarted(), "the queue is paused")

    def _pause_changed(self, paused: bool) -> None:
        self._life.pause_changed(paused)
        if not paused:  # a pause over before the fetcher saw it: what workers held back runs
            self._capacity.let_held_back_run()
        # The fetcher looks again (a wait for room, a wait in _hold), and so does a run alone
        # waiting for the others.
        self._capacity.wake()

    def _receive_timeout(self, idle: bool) -> float:
        if not self._once:
            return self._poll_timeout
        # --once: an idle pool asks once and believes the answer; a busy one re-asks soon,
        # since the jobs it is finishing may have freed (or retried) work.
        return self._drain_timeout if idle else min(self._poll_timeout, 0.05)

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

