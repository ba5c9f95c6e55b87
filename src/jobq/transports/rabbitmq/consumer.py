"""RabbitMQ transport: prefetch as backpressure, ack on success in batches, retry tiers, DLX.

Deliveries arrive pushed (basic.consume, prefetch = the pool's concurrency plus buffer) into a
local list that ``receive`` hands out. Settling:

- ack: batched per channel (see rmq_acks), on the delivery's own channel;
- retry: publish a copy, due time in its headers, to the tier its delay hops through first
  (confirmed), then ack the original;
- dead-letter: publish a copy with the reason in its headers to ``<q>.dlx`` -> ``<q>.dead``
  (confirmed), then ack;
- release: publish a copy with the attempt header unchanged back to the work queue (confirmed),
  then ack. Not a nack with requeue: quorum queues count that as a delivery
  (``x-delivery-count``), classic ones set ``redelivered``, and either reads as a crash.
  The price: the released job goes to the back of the queue.

A message that arrives before its due time (``x-jobq-due``: a delay or retry hopping through the
tiers) is not run either: it goes on to the next tier, or, due sooner than the shortest tier,
waits here unacked until its time (see ``_not_yet``).

A crash redelivery is not run but copied to ``<q>.alone`` (on a classic queue: its second; the
first goes back to the work queue marked, see rmq crashes), which no one
subscribes to: while it holds copies, the consumer hands out no more work, lets what is out
settle, and takes them one at a time with basic.get, each handed out alone (see rmq alone), so
a crash during that run can only be its own.

A lost connection or channel ends the session: buffered deliveries are dropped, later settles
of its deliveries are ignored (the broker redelivers those messages), and a supervisor
reconnects with backoff, re-declares and consumes again.

While the queue is paused (``quiesce``) the consumer is cancelled, as at shutdown, and
what had arrived is released; a new session does not subscribe until the resume.

A message whose id has a tombstone in ``<q>.cancelled`` (``jobq jobs cancel``, read each second:
tombstones.py) is acked unrun; one running when its tombstone is read is cancelled by the pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiormq.abc import DeliveredMessage

from jobq.backoff import Backoff
from jobq.config import LimitsConfig, RabbitConfig
from jobq.errors import ConfigError, ConnectionLost, TransportError, describe
from jobq.job import (
    CancelRequested,
    Decision,
    Delivery,
    Spent,
)
from jobq.looks import uncut
from jobq.transport import Health
from jobq.transports.common import carry_out
from jobq.transports.rabbitmq import frames
from jobq.transports.rabbitmq.acktimeout import consumer_timeout_warning
from jobq.transports.rabbitmq.alone import POLL, AloneQueue
from jobq.transports.rabbitmq.codec import (
    ATTEMPT,
    DUE,
    ISOLATE,
    MARKS,
    SUSPECT,
    due_ms,
    republish,
)
from jobq.transports.rabbitmq.connect import RabbitLink, translated
from jobq.transports.rabbitmq.copies import Copier, CopyNacked, CopyTimeout
from jobq.transports.rabbitmq.crashes import CrashCopy
from jobq.transports.rabbitmq.inbound import Rules, classify
from jobq.transports.rabbitmq.session import Handle, Session
from jobq.transports.rabbitmq.tombstones import Tombstones
from jobq.transports.rabbitmq.topology import Topology

T = TypeVar("T")

# An idle consumer with free prefetch gets a ready message within milliseconds; half a
# second of silence (confirmed by the queue's ready count) means drained: the pool's receive
# timeout when an idle --once pool asks "drained?" (the container gives it to the pool).
DRAIN_TIMEOUT = 0.5
QUIET = 0.05  # at close: time for deliveries made room for by the last acks to arrive
RESUME_WAIT = 5.0  # a receive while reconnecting waits this long before reporting it
RESUME_POLL = 0.05  # a session that ended before the supervisor noticed: look again this often
ACK_POLLS = 50  # before a run alone: ack_intervals to wait for owed acks to be sent
SOLO_ROUND = 8  # runs alone in a row, at most, while work from the work queue waits
DRAIN_STALL = 30.0  # --once: seconds a queue may hold ready messages that never come, then drained
WATCH = 1.0  # the supervisor looks at the session's channels this often (see _until_lost)
TOMBSTONE_POLL = 1.0  # seconds between looks at <q>.cancelled (tombstones.py)
HOLD_MARGIN = 0.001  # a held message wakes this much after its due time (timers round to 1 ms)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RabbitTransport:
    """Consumer of one jobq queue on RabbitMQ."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str, prefetch: int,
                 max_attempts: int, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None, publish_link: RabbitLink | None = None,
                 job_timeout: float | None = None, concurrency: int = 0) -> None:
        frames.install()  # a message pamqp cannot decode must cost that message, not the connection
        self._link = link
        # The copies' connection (see copies.py); the consuming one if none is given (tests).
        self._publish_link = publish_link or link
        self._limits = limits or LimitsConfig()
        self._copier = Copier(self._publish_link, settings.publish_timeout,
                              bounded=queue if self._limits.max_pending else "")
        self._cfg = settings
        self._queue = queue
        self._prefetch = prefetch
        self._job_timeout, self._concurrency = job_timeout, concurrency  # for the start-up check
        self._topology = Topology.configured(settings, queue, self._limits.max_pending)
        # A classic queue that recovers from a crash of its broker hands out every message it
        # held as redelivered: a first redelivery there runs again with the others, marked,
        # and alone only at the second (see rmq crashes). Quorum queues count real deliveries.
        # Not with limits.max_pending: a full work queue would refuse the copy, and the
        # original, handed back, would come straight back to be copied again.
        self._rules = Rules(queue, max_attempts, self._limits, settings.default_kind,
                            strikes=self._topology.queue_type == "classic"
                            and not self._limits.max_pending)
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._arrived: collections.deque[Delivery] = collections.deque()
        self._alone = AloneQueue(self._topology.alone, settings.publish_timeout)
        self._out = 0  # deliveries handed to the pool and not yet settled
        self._solos = 0  # runs alone since work from the work queue was last handed out
        self._copying: set[asyncio.Task[None]] = set()  # crash redeliveries being copied forward
        self._watcher: asyncio.Task[None] | None = None  # looks at <q>.alone (_watch_alone)
        self._tombstones = Tombstones(link, self._topology)  # cancelled jobs' ids (jobq jobs cancel)
        self._mourner: asyncio.Task[None] | None = None  # reads them (_watch_tombstones)
        self._waiter: asyncio.Future[None] | None = None  # a receive waiting for a delivery
        self._resumed = asyncio.Event()  # set while a session is consuming
        self._session: Session | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._paused = False  # the queue is paused: no basic.consume (quiesce)
        self._closed = asyncio.Event()  # set when close() begins: copies held for an alarm end
        self._let_go = asyncio.Event()  # set at close and while paused: held early messages go back
        self._held: set[Handle] = set()  # originals whose copy waits for unblocked (_hold)
        self._held_back = 0  # held originals left unacked at a close or loss (come back)
        self.stale = 0  # settles dropped because their session had ended
        self.reconnects = 0
        self.cancelled_unrun = 0  # received with a tombstone: acked unrun

    def health(self) -> Health:
        """Connected while a session is consuming (not from a lost one until it resumes);
        stale settles, reconnects and jobs acked unrun as cancelled (exported as metrics)."""
        return Health(self._resumed.is_set(), {"stale": self.stale, "reconnects": self.reconnects,
                                               "cancelled_unrun": self.cancelled_unrun},
                      self._tombstones.ids.keys())

    @property
    def blocked(self) -> bool:
        """True while the broker blocks the copies' connection (exported as jobq_broker_blocked)."""
        return self._publish_link.blocked

    async def open(self) -> None:
        """Declare the topology and start consuming; keep doing so across reconnects."""
        if self._concurrency:
            warning = consumer_timeout_warning(
                consumer_timeout=self._cfg.consumer_timeout, job_timeout=self._job_timeout,
                prefetch=self._prefetch, concurrency=self._concurrency)
            if warning:
                self._log.warning("%s", warning)
        await self._start_session()
        self._supervisor = asyncio.create_task(self._supervise(), name="jobq-rmq-supervisor")
        self._mourner = asyncio.create_task(self._watch_tombstones(), name="jobq-rmq-tombstones")

    async def close(self) -> None:
        """Stop consuming, hand back what never reached the pool, flush acks, close channels."""
        self._closing = True
        self._closed.set()
        self._let_go.set()
        for task in (self._supervisor, self._watcher, self._mourner):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        session = self._session
        if session is not None and session.alive and (session.consumer_tag is not None
                                                      or self._arrived):  # not quiesced already
            await self._stop_consuming(session)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if session is not None:
            await session.finish()
        if self._held_back:
            self._log.warning("%d copies held while the broker blocked publishing were not sent; "
                              "the broker delivers those jobs again", self._held_back)
        if self.stale:
            self._log.info("%d settles were for deliveries of a lost connection; the broker "
                           "delivers those jobs again", self.stale)

    async def _stop_consuming(self, session: Session) -> None:
        """Cancel the consumer, then release every delivery that arrived, with no new ones.

        An ack makes room for more deliveries; one the queue sends just as the consumer is
        cancelled is not handed to us but returned when the channel closes, with a delivery
        counted (seen with quorum queues). So acks are held from here on, deliveries made
        room for by the last acks get QUIET seconds to land, and only then the cancel goes.
        """
        session.hold_acks()
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, session.last_ack + QUIET - loop.time()))
        await session.cancel_consumer()
        for _ in range(3):  # deliveries read before the cancel-ok run as aiormq tasks: let them land
            await asyncio.sleep(0)
        while self._arrived and session.alive:
            await self._give_back_quietly(self._arrived.popleft())
        session.send_acks()

    async def quiesce(self) -> None:
        """Cancel the consumer and release what arrived and was not handed out (at a pause
        and at a graceful stop, so nothing more arrives while the running jobs finish).
        Not a nack or a recover: either would count a delivery (a crash)."""
        await self._set_paused(True)

    async def resume(self) -> None:
        """Consume again."""
        await self._set_paused(False)

    async def _set_paused(self, paused: bool) -> None:
        if paused == self._paused:
            return
        self._paused = paused
        if paused:
            self._let_go.set()  # what _not_yet holds goes back too, not into a paused buffer
        elif not self._closing:
            self._let_go.clear()
        session = self._session
        if session is None or not session.alive:
            return  # the next session consumes or not as _paused says
        if paused:
            await self._stop_consuming(session)
        elif session.consumer_tag is None:
            try:
                await self._subscribe(session)
            except TransportError as exc:
                session.end(f"consume after the resume failed: {describe(exc)}")

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Up to ``max_count`` deliveries that arrived; wait up to ``timeout`` for the first.

        While ``<q>.alone`` holds copies, one of them alone instead (see _receive_alone).
        """
        arrived = self._arrived
        # SOLO_ROUND runs alone in a row at most while work waits: it is held unacked
        # meanwhile, and the broker's consumer_timeout counts for it too.
        if self._takes_alone() and not (self._solos >= SOLO_ROUND and arrived):
            solo = await self._receive_alone(timeout)
            if solo is not None:
                return solo
        if not arrived:
            await self._wait(timeout)
            if not arrived and self._takes_alone():  # woken for <q>.alone
                return await self._receive_alone(timeout) or []
        n = min(max_count, len(arrived))
        self._out += n
        if n:
            self._solos = 0
        return [arrived.popleft() for _ in range(n)]

    def _takes_alone(self) -> bool:
        """True while ``<q>.alone`` holds copies and a live session can take them.

        Never while reconnecting or closing: receive would then return at once, and the pool,
        asking again at once, would spin and starve the event loop (the supervisor included).
        """
        session = self._session
        return (self._alone.due and not self._closing and session is not None
                and session.alive)

    async def _receive_alone(self, timeout: float) -> list[Delivery] | None:
        """The next copy from ``<q>.alone``, once nothing else is out; None once it is empty.

        [] if what is out does not settle within ``timeout`` (nothing more is handed out
        meanwhile, so it drains). Deliveries of the work queue that arrive meanwhile wait
        unacked: if the run alone kills the process they come back uncharged (not marked).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._out:  # a run alone included
            if loop.time() >= deadline:
                return []
            await self._sleep(deadline)  # woken by the settle that leaves none out (_done)
        session = self._session
        if session is None or not session.alive:
            return None
        # Copies still being made, and acks owed, first: an original not yet acked when this
        # run kills the process would come back too, and be copied (or charged) again.
        if self._copying:
            await asyncio.shield(asyncio.gather(*self._copying))
        wanted = [True]  # False once this receive is cancelled (shutdown)
        taking = self._spawn(self._take_alone(session, wanted))
        try:
            delivery = await asyncio.shield(taking)
        except asyncio.CancelledError:
            wanted[0] = False  # a copy the take still gets, it gives back
            if taking.done() and not taking.cancelled() and taking.exception() is None:
                taken = taking.result()
                if taken is not None:  # taken as the cancel came: back to <q>.alone
                    self._spawn(self._give_back_quietly(taken))
            raise
        if delivery is None:
            return None
        self._out += 1
        self._solos += 1
        return [delivery]

    async def _take_alone(self, session: Session, wanted: list[bool]) -> Delivery | None:
        """basic.get until a copy is to run (crashed ones charged or buried on the way); None
        once ``<q>.alone`` is empty or the session ended.

        A task of its own, which a cancelled receive does not cancel: a basic.get cancelled
        half-way closes the channel when its answer comes (aiormq has no getter for it), and a
        copy forwarded half-way would be forwarded twice. A copy taken for a receive that was
        cancelled meanwhile goes back to ``<q>.alone``, mark and attempt kept.
        """
        while session.alive and not self._closing:
            await self._acks_sent(session)
            try:
                message = await self._alone.take(session.raw)
            except ConnectionLost as exc:
                session.end(f"basic.get failed: {describe(exc)}")
                return None
            if message is None:
                return None
            deliver: Any = message.delivery  # GetOk: it has the tag
            arrival = classify(message.body, message.header.properties,
                               redelivered=deliver.redelivered,
                               handle=Handle(session, deliver.delivery_tag, message),
                               rules=self._rules, cancelled=self._tombstones.ids,
                               now=time.time(), alone=True)
            delivery = arrival.delivery
            if arrival.due is not None:
                # Not due yet: it never ran (an early message is never handed out), so no crash
                # was its own, however often it was delivered: back through the hops, unmarked.
                tier = self._topology.hop(arrival.due - time.time())
                with contextlib.suppress(TransportError):
                    await self._forward(delivery, "", tier or self._queue, {}, drop=MARKS)
                continue
            if arrival.copy is not None:  # crashed while it ran alone: charged
                await self._copy_forward(delivery, arrival.copy)
                continue
            if isinstance(delivery.fact, CancelRequested):  # settled unrun, as from the work queue
                self._cancel_requested(delivery)
            if not wanted[0]:
                await self._give_back_quietly(delivery)
                return None
            return delivery
        return None

    async def _give_back_quietly(self, delivery: Delivery) -> None:
        with contextlib.suppress(TransportError):
            await self._give_back(delivery)

    def _done(self) -> None:
        """A delivery handed out is being settled."""
        self._out -= 1
        if not self._out and self._alone.due:
            self._wake()

    async def _acks_sent(self, session: Session) -> None:
        """Until every completed tag's ack is sent (the ack loop sends within ack_interval)."""
        for _ in range(ACK_POLLS):
            if not (session.alive and session.tracker.waiting):
                return
            await asyncio.sleep(self._cfg.ack_interval)

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Ack: the job is gone from the queue (its tombstone stays until it expires)."""
        await self._ack(delivery)

    async def _watch_tombstones(self) -> None:
        """Read ``<q>.cancelled`` again whenever its count changes, looking each second."""
        failing = False
        while True:
            await asyncio.sleep(TOMBSTONE_POLL)
            try:
                await self._tombstones.refresh()
                failing = False
            except TransportError as exc:  # a lost link: the supervisor reconnects
                if not failing:
                    self._log.warning("could not read the tombstones of cancelled jobs (%s); "
                                      "trying again each second", describe(exc))
                failing = True

    def _cancel_requested(self, delivery: Delivery) -> None:
        """A delivery with a tombstone: to the pool with that fact, to be settled unrun."""
        self.cancelled_unrun += 1
        self._log.info("job %s cancelled (jobq jobs cancel): received with a tombstone, "
                       "settled unrun", delivery.job.id)
        delivery.fact = CancelRequested()  # set already when it arrived with its tombstone

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``)."""
        await carry_out(self, delivery, decision)

    async def _ack(self, delivery: Delivery) -> None:
        """Ack with the next batch, on the delivery's own channel."""
        self._done()
        handle: Handle = delivery.handle
        if handle.session.alive:
            handle.session.complete(handle.tag)
        else:
            self.stale += 1

    async def _retry(self, delivery: Delivery, delay: float, reason: str) -> None:
        """Publish to the tier for ``delay`` (confirmed), then ack the original.

        The isolate mark is dropped: the job failed cleanly, it did not crash. A delay shorter
        than every tier goes to the work queue with its due time, held by whoever takes it.
        """
        job = delivery.job
        headers: dict[str, Any] = {ATTEMPT: job.attempt + 1, "x-jobq-max-attempts": job.max_attempts,
                                   "x-jobq-last-error": reason}
        tier = None
        if delay > 0:
            headers[DUE] = due_ms(time.time() + delay)
            tier = self._topology.hop(delay)
        try:
            await self._forward(delivery, "", tier or self._queue, headers,
                                drop=MARKS if delay > 0 else (*MARKS, DUE))
        finally:
            self._done()

    async def _dead(self, delivery: Delivery, reason: str) -> None:
        """Publish to ``<q>.dlx`` with the reason in the headers (confirmed), then ack."""
        try:
            await self._bury(delivery, reason)
        finally:
            self._done()

    async def _bury(self, delivery: Delivery, reason: str) -> None:
        job = delivery.job
        await self._forward(delivery, self._topology.dlx, self._queue, {
            ATTEMPT: job.attempt, "x-jobq-attempts": job.attempt,
            "x-jobq-max-attempts": job.max_attempts, "x-jobq-error": reason,
            "x-jobq-dead-at": datetime.now(UTC).isoformat(timespec="milliseconds")},
            drop=(*MARKS, DUE))

    async def _release(self, delivery: Delivery) -> None:
        """Publish back to the work queue with the attempt uncounted (confirmed), then ack.

        One taken from ``<q>.alone`` goes back there, mark and attempt kept.
        """
        try:
            await self._give_back(delivery)
        finally:
            self._done()

    async def _give_back(self, delivery: Delivery) -> None:
        # A release does not wait for a broker that takes no publishes: one release waiting
        # out rabbitmq.publish_timeout is enough to know (shutdown releases them one by one).
        # One whose attempts are spent goes back charged, so that it is found spent again (a
        # copy is not redelivered: a crash's mark would not be seen on it).
        home = self._alone.name if delivery.isolate else self._queue
        attempt = delivery.job.attempt + (1 if isinstance(delivery.fact, Spent) else 0)
        await self._forward(delivery, "", home, {ATTEMPT: attempt}, patient=False)

    async def _forward(self, delivery: Delivery, exchange: str, routing_key: str,
                       headers: dict[str, Any], drop: tuple[str, ...] = (), *,
                       patient: bool = True) -> None:
        handle: Handle = delivery.handle
        session = handle.session
        if not session.alive:
            self.stale += 1
            return
        raw = handle.message
        job = delivery.job
        body, props = republish(raw.body, raw.header.properties, headers, drop, (job.id, job.kind))
        copier = self._copier
        if patient and self._publish_link.blocked and not self._closing:
            self._hold(handle, body, props, exchange, routing_key)
            return
        try:
            if not patient and copier.failing:
                copier.refuse(routing_key)
            await copier.send(session.sender, body, props, exchange=exchange,
                              routing_key=routing_key)
        except ConnectionLost as exc:
            # The channel or connection is gone, whether or not its close callback has run
            # yet: end the session now so the supervisor reconnects (the broker redelivers
            # the original with the rest of the session's deliveries).
            session.end(f"publish failed: {describe(exc)}")
            raise
        except CopyNacked as exc:
            # Refused for the whole deadline: new channels (the supervisor reconnects), and the
            # original comes back with the session's other deliveries.
            session.end(f"copies refused: {describe(exc)}")
            raise
        except CopyTimeout:
            if patient and self._publish_link.blocked and not self._closing and session.alive:
                # The alarm came while it waited: hold it too (sent again once unblocked; the
                # first may still arrive, a duplicate).
                self._hold(handle, body, props, exchange, routing_key)
                return
            await session.requeue(handle.tag)
            raise
        except TransportError:
            # Not forwarded: give the original back now rather than pinning a prefetch slot;
            # the broker counts that delivery, as it would after a crash.
            await session.requeue(handle.tag)
            raise
        self._forwarded(handle)

    def _forwarded(self, handle: Handle) -> None:
        if handle.session.alive:
            handle.session.complete(handle.tag)
        else:
            self.stale += 1  # forwarded, but the original's ack is lost: it comes back too

    def _hold(self, handle: Handle, body: bytes, props: Any, exchange: str,
              routing_key: str) -> None:
        """Keep the original unacked and send its copy once the broker unblocks publishing.

        Not nacked back: that counts a delivery on quorum queues and the original would come
        straight back as a crash redelivery, whose own copy is blocked too; every
        publish_timeout another count, until the queue's delivery limit dead-letters a job that
        never failed (and a marked one is charged a crash each time). Held originals pin their
        prefetch slots, so while blocked at most the prefetch is held and the broker sends
        nothing more once they fill it. At shutdown or a lost session they stay unacked: the
        channel's close gives them back (one delivery counted).
        """
        if handle in self._held:
            return
        self._held.add(handle)
        self._spawn(self._send_when_unblocked(handle, body, props, exchange, routing_key))

    async def _send_when_unblocked(self, handle: Handle, body: bytes, props: Any,
                                   exchange: str, routing_key: str) -> None:
        session, link = handle.session, self._publish_link
        try:
            while True:
                await self._until_unblocked(session)
                if self._closing or not session.alive:
                    self._held_back += 1  # left unacked: given back by the channel's close or loss
                    return
                try:
                    await self._copier.send(session.sender, body, props, exchange=exchange,
                                            routing_key=routing_key)
                except ConnectionLost as exc:
                    session.end(f"publish failed: {describe(exc)}")
                    return
                except CopyTimeout:
                    if link.blocked:
                        continue  # blocked again: hold on
                    await self._give_up(handle, routing_key)
                    return
                except TransportError:
                    await self._give_up(handle, routing_key)
                    return
                self._forwarded(handle)
                return
        finally:
            self._held.discard(handle)

    async def _give_up(self, handle: Handle, routing_key: str) -> None:
        self._log.error("could not publish a held copy to %s; the original goes back to the "
                        "queue", routing_key)
        await handle.session.requeue(handle.tag)

    async def _until_unblocked(self, session: Session) -> None:
        """Until publishing is unblocked, the session ends or close() begins."""
        link = self._publish_link
        if not link.blocked:
            return
        waits = [asyncio.ensure_future(event.wait())
                 for event in (link.unblocked, session.lost, self._closed)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stalled_since: float | None = None
        while not self._arrived and not self._takes_alone():
            session = self._session
            if session is None or not session.alive:
                await self._await_resume(timeout)
                continue
            await self._sleep(deadline)
            if self._arrived or self._takes_alone() or loop.time() < deadline:
                continue
            # A silent drain probe (--once): while the queue still holds ready messages (or
            # cannot say), wait for them another drain_timeout, and again, up to DRAIN_STALL.
            # Giving up after one more (as before) ended a --once drain of a 1,000,000-job
            # quorum queue with 690,257 jobs left, after a one-second lull in deliveries.
            if timeout != DRAIN_TIMEOUT:
                return  # only an idle --once pool asks "drained?" (pool._receive_timeout)
            ready = await self._ready_count(session)
            if not ready and not self._copying:  # a copy still being sent is not in the count
                return
            stalled_since = loop.time() if stalled_since is None else stalled_since
            if loop.time() - stalled_since > DRAIN_STALL:
                self._log.warning("queue %r still holds %d ready messages, but none came for "
                                  "%gs: ending the drain (--once) with them left", self._queue,
                                  ready, DRAIN_STALL)
                return
            deadline = loop.time() + DRAIN_TIMEOUT

    async def _sleep(self, deadline: float) -> None:
        """Until a delivery arrives or the session ends (see _wake), or ``deadline``.

        A bare future and a timer: the cheapest wait asyncio has, and receive runs per batch.
        """
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_at(deadline, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter)

    async def _await_resume(self, timeout: float) -> None:
        """Wait for the supervisor to consume again; ConnectionLost if it takes too long.

        Waiting here (rather than failing at once) keeps the pool from piling up receive
        failures, whose backoff would otherwise idle it long after the broker is back.

        ``_resumed`` is still set for a moment after a session ends (until the supervisor
        runs): a set event's wait() returns without yielding, so the wait is for a live
        session, with a real sleep meanwhile. (Seen in the fault suite: a session ended by a
        failed basic.get, the receive loop spun on the set event, the supervisor never ran
        again and SIGTERM could not end the process.)
        """
        try:
            async with asyncio.timeout(max(timeout, RESUME_WAIT)):
                while True:
                    await self._resumed.wait()
                    session = self._session
                    if session is not None and session.alive:
                        return
                    await asyncio.sleep(RESUME_POLL)
        except TimeoutError:
            raise ConnectionLost(f"not connected to RabbitMQ at {self._link.address} "
                                 "(reconnecting)") from None

    async def _ready_count(self, session: Session) -> int:
        """Ready messages in the work queue and ``<q>.alone`` (``due`` set if it holds any)."""
        try:
            # On the consuming connection: a blocked one reads nothing, not even a declare.
            with translated("rabbitmq queue depth"):  # never cut: see Alone.count
                queue = await uncut(session.consume.declare_queue(
                    self._queue, passive=True, timeout=self._cfg.publish_timeout))
            alone = await self._alone.count(session.consume)
        except (TransportError, TimeoutError):
            return 1  # cannot tell: not drained as far as we know
        self._alone.due = self._alone.due or alone > 0
        return int(queue.declaration_result.message_count or 0) + alone

    async def _watch_alone(self, session: Session) -> None:
        """Look at ``<q>.alone`` now and every POLL seconds; ``due`` (and a wake) when it holds any.

        A failed look ends nothing: the supervisor watches the session.
        """
        while session.alive and not self._closing:
            if not self._alone.due:
                with contextlib.suppress(TransportError):
                    if await self._alone.count(session.consume):
                        self._alone.due = True
                        self._wake()
            await asyncio.sleep(POLL)

    async def _on_message(self, session: Session, message: DeliveredMessage) -> None:
        """A delivery from basic.consume: handed out, held or sent on, or copied forward."""
        if not session.alive:
            return
        deliver: Any = message.delivery  # Deliver: it has the tag
        arrival = classify(message.body, message.header.properties,
                           redelivered=deliver.redelivered,
                           handle=Handle(session, deliver.delivery_tag, message),
                           rules=self._rules, cancelled=self._tombstones.ids, now=time.time())
        delivery = arrival.delivery
        if arrival.due is not None:
            self._spawn(self._not_yet(delivery, arrival.due))
        elif arrival.copy is not None:
            copying = self._spawn(self._copy_forward(delivery, arrival.copy))
            self._copying.add(copying)
            copying.add_done_callback(self._copying.discard)
        else:
            if isinstance(delivery.fact, CancelRequested):
                self._cancel_requested(delivery)
            self._arrive(delivery)

    def _arrive(self, delivery: Delivery) -> None:
        """For the pool's next receive."""
        self._arrived.append(delivery)
        if self._waiter is not None:
            _resolve(self._waiter)

    async def _not_yet(self, delivery: Delivery, due: float) -> None:
        """A message that came before ``due`` (epoch seconds): on to the next tier, or held.

        Held (due sooner than the shortest tier) it stays unacked, in a prefetch slot, and is
        handed out at its time; at close or a pause it is given back (a paused consumer keeps
        nothing), after a lost session the broker redelivers it. Neither a hop nor a hold
        counts an attempt.
        """
        wait = due - time.time()
        tier = self._topology.hop(wait)
        if tier is not None:
            with contextlib.suppress(TransportError):  # not forwarded: the original comes back
                await self._forward(delivery, "", tier, {})
            return
        let_go = self._let_go
        while wait > 0 and not let_go.is_set():  # a timer may fire a hair early: never run early
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait + HOLD_MARGIN):
                    await let_go.wait()
            wait = due - time.time()
        if not delivery.handle.session.alive:
            return
        if self._closing or self._paused:
            await self._give_back_quietly(delivery)
            return
        if delivery.job.id in self._tombstones:  # cancelled while it was held
            self._cancel_requested(delivery)
        self._arrived.append(delivery)
        self._wake()

    def _spawn_quietly(self, work: Coroutine[Any, Any, None]) -> None:
        """``_spawn`` without handing the task back (for callbacks whose result is awaited)."""
        self._spawn(work)

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` in the background; close() waits for it."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _copy_forward(self, delivery: Delivery, copy: CrashCopy) -> None:
        """A crash redelivery: its copy to ``<q>.alone`` (a classic queue's first one: back to
        the work queue, marked suspect; see rmq crashes). One whose crashes used up its
        attempts is not copied: it goes to the pool with that fact (``Spent``)."""
        job = delivery.job
        try:
            if copy.suspect:
                self._log.debug("job %s came back redelivered; it runs again, alone if it comes "
                                "back once more", job.id)
                await self._forward(delivery, "", self._queue, {ATTEMPT: copy.attempt, SUSPECT: 1})
                return
            charged = copy.attempt > job.attempt
            self._log.info("job %s was in flight when a consumer died or lost its channel; "
                           "it runs again alone (attempt %d of %d%s)", job.id, copy.attempt,
                           job.max_attempts, ", that crash counted" if charged else "")
            await self._forward(delivery, "", self._alone.name, {ATTEMPT: copy.attempt, ISOLATE: 1},
                                drop=(SUSPECT,))
            self._alone.due = True
        except TransportError as exc:
            self._log.error("could not copy job %s forward (%s)", job.id, describe(exc))

    async def _start_session(self) -> None:
        """Open channels on the link, declare, set the prefetch and consume."""
        link, topology = self._link, self._topology
        consume = await link.channel(confirms=False)
        try:
            with translated("rabbitmq declare"):
                down = await topology.declare_consuming(
                    consume, lambda: link.channel(confirms=False))
                await consume.set_qos(prefetch_count=self._prefetch)
                publish = await self._publish_link.channel(confirms=True)
                sender = await publish.get_underlay_channel()
                raw = await consume.get_underlay_channel()
        except BaseException:
            with contextlib.suppress(Exception):
                await consume.close()
            raise
        if down:
            self._log.warning(
                "RabbitMQ cannot reach %s (a classic queue whose node is down): consuming on, "
                "with the pause and the cancelled jobs as last read and dead letters held "
                "back until that node is back", ", ".join(down))
        with contextlib.suppress(TransportError):  # read each second after this too
            await self._tombstones.read()  # before the first delivery
        session = Session(link.generation, consume, raw, publish, sender,
                          ack_interval=self._cfg.ack_interval,
                          ack_batch=max(1, self._prefetch // 2), logger=self._log)
        # aiormq awaits this callback inside the channel's frame reader (and awaits what it
        # returns): anything that waits for a reply on the channel must run as a task it is
        # not given, or it waits for itself.
        raw.on_consumer_cancel_callbacks.add(lambda _frame: self._spawn_quietly(
            self._resubscribe(session)))
        try:
            if not self._paused:
                await self._subscribe(session)
        except BaseException:
            await session.close()
            raise
        self._session = session
        self._watcher = asyncio.create_task(self._watch_alone(session), name="jobq-rmq-alone")
        self._resumed.set()
        self._log.info("%s %r on RabbitMQ at %s (%s queue, prefetch %d)",
                       "connected (paused) to" if self._paused else "consuming", self._queue,
                       link.address, topology.queue_type, self._prefetch)

    async def _subscribe(self, session: Session) -> None:
        with translated("rabbitmq consume"):
            ok = await session.raw.basic_consume(self._queue,
                                                 functools.partial(self._on_message, session))
        session.consumer_tag = ok.consumer_tag

    async def _resubscribe(self, session: Session) -> None:
        """The broker cancelled our consumer (queue deleted, leader moved): consume again."""
        if not session.alive or self._closing or self._paused:
            return
        self._log.warning("consumer cancelled by the broker; declaring and subscribing again")
        try:
            with translated("rabbitmq re-declare"):
                await self._topology.declare_consuming(
                    session.consume, lambda: self._link.channel(confirms=False))
            await self._subscribe(session)
        except (TransportError, ConfigError) as exc:
            session.end(f"re-subscribe failed: {describe(exc)}")

    async def _supervise(self) -> None:
        """Wait for the session to end; then reconnect with backoff and start a new one."""
        backoff = Backoff.from_connect(self._link.connect_config)
        while True:
            session = self._session
            assert session is not None
            await self._until_lost(session)
            self._log.warning("lost the RabbitMQ session (%s); %d buffered deliveries dropped "
                              "(the broker redelivers them); reconnecting", session.reason,
                              len(self._arrived))
            self._resumed.clear()
            self._arrived.clear()
            self._wake()
            await session.close()
            async for attempt in backoff.attempts():
                try:
                    for link in dict.fromkeys((self._link, self._publish_link)):
                        if not link.is_open or attempt.number > 1:
                            await link.reopen()
                    await self._start_session()
                    break
                except Exception as exc:  # whatever it is, the supervisor must go on reconnecting
                    self._log.warning("could not resume consuming (%s); retrying in %.1fs",
                                      describe(exc), attempt.delay)
            self.reconnects += 1

    async def _until_lost(self, session: Session) -> None:
        """Until the session ends, or its channels or connection turn out closed.

        The close callbacks normally end it; the look every WATCH seconds is for a loss
        nothing reported (a callback that never ran), so no loss goes unnoticed for long.
        """
        while not session.lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WATCH):
                    await session.lost.wait()
            if session.broken() or not (self._link.is_open and self._publish_link.is_open):
                session.end(session.reason or "channel or connection found closed")
