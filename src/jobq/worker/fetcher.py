"""The pool's receive loop: it asks the transport for free room only, one receive ahead.

It backs off when receiving fails and holds while the queue is paused (handing back the
unstarted, receiving nothing). What it receives goes into the capacity's queue (a crash
suspect waits there for its turn, one at a time: capacity.py); the workers take it from there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass

from jobq.core.backoff import pause
from jobq.core.errors import TransportError, describe
from jobq.core.job import Delivery
from jobq.core.port import Transport
from jobq.worker.bounds import RECEIVE_BACKOFF
from jobq.worker.budget import JobBudget
from jobq.worker.capacity import Capacity
from jobq.worker.lifecycle import Lifecycle
from jobq.worker.pausing import PauseWatch
from jobq.worker.settler import Settler
from jobq.worker.stats import PoolObserver, PoolStats


@dataclass(frozen=True, slots=True)
class Asking:
    """How long a receive may wait for jobs."""

    poll_timeout: float
    # --once: how long an idle pool's empty receive must wait before "nothing left" is
    # believed (0 for a claim, whose empty answer is the truth; RabbitMQ's DRAIN_TIMEOUT)
    drain_timeout: float
    once: bool

    def timeout(self, idle: bool) -> float:
        """A receive's timeout; ``idle``: nothing is held."""
        if not self.once:
            return self.poll_timeout
        # --once: an idle pool asks once and believes the answer; a busy one re-asks soon,
        # since the jobs it is finishing may have freed (or retried) work.
        return self.drain_timeout if idle else min(self.poll_timeout, 0.05)


class Fetcher:
    """Fills the capacity from ``transport.receive`` until a stop (or, ``--once``, until
    nothing is left). ``receive_failures``: consecutive failed receives (readiness)."""

    def __init__(self, transport: Transport, *, life: Lifecycle, capacity: Capacity,
                 settler: Settler, asking: Asking, pause_watch: PauseWatch | None,
                 started_at: Mapping[int, float], stats: PoolStats,
                 observer: PoolObserver | None, logger: logging.Logger) -> None:
        self._transport = transport
        self._life = life
        self._capacity = capacity
        self._settler = settler  # hands back the unstarted at a pause
        self._asking = asking
        self._pause = pause_watch
        self._started_at = started_at  # the running handlers (the pause's log line counts them)
        self._stats = stats
        self._observer = observer
        self._log = logger
        self.receive_failures = 0
        self.handback: asyncio.Future[None] | None = None  # the pause's hand-back, in flight
        self._ahead: asyncio.Task[list[Delivery]] | None = None  # the next receive, asked early
        self.budget: JobBudget | None = None  # consumer.max_jobs_per_process (budget.py)

    async def fetch(self) -> None:
        """Receive until stopped; what a receive started early brought is in hand at the end."""
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
        capacity, life = self._capacity, self._life
        while not life.stopped:
            if self.budget is not None and self.budget.spent and self._ahead is None:
                self.budget.announce()
                await self._until_settled()  # what it holds runs first: none is handed back
                return  # then the pool stops, as --once does
            capacity.measure(time.monotonic(), self._stats.settled)
            idle_before = False
            receiving: Awaitable[list[Delivery]]
            if self._ahead is not None:
                # Shielded: a cancel of the fetcher must not drop a batch the receive has
                # already taken; self._ahead stays set until it is in hand (_end_ahead).
                receiving = asyncio.shield(self._ahead)
            else:
                if life.paused:
                    if not await self._hold():
                        return
                    continue
                if not await capacity.room_for_a_batch():
                    continue
                idle_before = capacity.outstanding == 0
                receiving = self._receive(capacity.ask(capacity.size - capacity.outstanding),
                                          self._asking.timeout(idle_before))
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
                if self._asking.once and idle_before:
                    self._log.info("nothing left to do (--once)")
                    return
                continue
            await self._take_in(batch)

    async def _take_in(self, batch: list[Delivery]) -> None:
        """Hand ``batch`` to the workers, the next receive started first if there is room."""
        self._ahead = self._ask_ahead(batch)
        try:
            if self._ahead is not None:  # one loop turn: its request goes out first
                await asyncio.sleep(0)
        finally:  # in the workers' hands even if cancelled meanwhile: released at stop
            self._accept(batch)

    async def _until_settled(self) -> None:
        """Until every delivery received has settled (or a stop)."""
        capacity, life = self._capacity, self._life
        while capacity.outstanding and not life.stopped:
            capacity.room.clear()  # set by every settle once the workers' queue is empty
            await capacity.room.wait()

    async def _receive_failed(self, exc: TransportError, failures: int) -> None:
        self._stats.receive_failures += 1
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
        claims only for free workers), not while paused or stopping."""
        capacity = self._capacity
        room = capacity.size - capacity.outstanding - len(batch)
        if capacity.unbuffered or room < capacity.low_water or self._life.holds_back:
            return None
        return asyncio.ensure_future(self._receive(capacity.ask(room), self._asking.timeout(False)))

    async def _receive(self, count: int, timeout: float) -> list[Delivery]:
        """``transport.receive``, for no more jobs than the budget has left."""
        budget = self.budget
        if budget is None:
            return await self._transport.receive(count, timeout)
        if budget.spent:
            return []
        batch = await self._transport.receive(min(count, budget.left), timeout)
        budget.received += len(batch)
        return batch

    def _accept(self, batch: list[Delivery]) -> None:
        """Take a received batch in: to the workers (a crash suspect when its turn comes)."""
        if self._stats.first_job_at is None:
            self._stats.first_job_at = time.monotonic()
        self._capacity.accept(batch)
        if self._observer is not None:
            self._observer.gauges(self._capacity.outstanding, self._capacity.queue.qsize())

    async def _hold(self) -> bool:
        """While the queue is paused: hand back the unstarted, receive nothing, wait for the
        resume; False when the pool is to stop instead (stopped, or ``--once``)."""
        running = len(self._started_at)
        self._log.warning("queue paused (jobq pause): taking no new jobs until it is resumed; "
                          "%d running finish", running)
        self.handback = asyncio.ensure_future(self._hand_back())
        await asyncio.shield(self.handback)  # a stop meanwhile lets it finish (run() waits)
        self.handback = None
        if self._asking.once:
            self._log.info("the queue is paused: nothing more to do (--once)")
            return False
        life, room = self._life, self._capacity.room
        while life.paused and not life.stopped:
            room.clear()  # set by the resume, a stop, and every settle: no spinning
            await room.wait()
        if life.stopped:
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
