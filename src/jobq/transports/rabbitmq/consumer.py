"""RabbitMQ transport: prefetch as backpressure, ack on success in batches, retry tiers, DLX.

Deliveries arrive pushed (basic.consume, prefetch = the pool's concurrency plus buffer) into a
local list (``state.Inbox``) that ``receive`` hands out. The parts, each a module:

- supervisor.py: the sessions (session.py): started, replaced after a loss with backoff,
  re-subscribed when the broker cancels the consumer;
- inbound.py: what a message that arrived is, decided without I/O; this module does what it
  says: hands it out, holds it until due or sends it on (``_not_yet``), or copies it forward;
- settling.py, forwarding.py: the pool's decisions carried out, as acks and as copies (retry
  tiers, dead letter, release) confirmed before the original's ack;
- solos.py: the suspects, the copies in ``<q>.alone`` taken one at a time (see alone.py).

While the queue is paused (``quiesce``) the consumer is cancelled, as at shutdown, and what
had arrived is released; a new session does not subscribe until the resume. A message whose id
has a tombstone in ``<q>.cancelled`` (``jobq jobs cancel``, read each second: tombstones.py)
is settled unrun; one running when its tombstone is read is cancelled by the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any

from aiormq.abc import DeliveredMessage

from jobq.config import LimitsConfig, RabbitConfig
from jobq.core.errors import TransportError, describe
from jobq.core.job import CancelRequested, Decision, Delivery
from jobq.core.port import Health
from jobq.core.within import cancelled
from jobq.transports.common import carry_out
from jobq.transports.rabbitmq import frames
from jobq.transports.rabbitmq.acktimeout import consumer_timeout_warning
from jobq.transports.rabbitmq.alone import AloneQueue
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.copies import Copier
from jobq.transports.rabbitmq.forwarding import Forwarder
from jobq.transports.rabbitmq.inbound import Rules, classify
from jobq.transports.rabbitmq.session import Handle, Session
from jobq.transports.rabbitmq.settling import Settler
from jobq.transports.rabbitmq.solos import RunAlone
from jobq.transports.rabbitmq.state import Background, Inbox, State
from jobq.transports.rabbitmq.supervisor import Supervisor
from jobq.transports.rabbitmq.tombstones import Tombstones
from jobq.transports.rabbitmq.topology import Topology

# An idle consumer with free prefetch gets a ready message within milliseconds; half a
# second of silence (confirmed by the queue's ready count) means drained: the pool's receive
# timeout when an idle --once pool asks "drained?" (the container gives it to the pool).
DRAIN_TIMEOUT = 0.5
QUIET = 0.05  # at close: time for deliveries made room for by the last acks to arrive
DRAIN_STALL = 30.0  # --once: seconds a queue may hold ready messages that never come, then drained
HOLD_MARGIN = 0.001  # a held message wakes this much after its due time (timers round to 1 ms)


class RabbitTransport:
    """Consumer of one jobq queue on RabbitMQ."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str, prefetch: int,
                 max_attempts: int, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None, publish_link: RabbitLink | None = None,
                 job_timeout: float | None = None, concurrency: int = 0) -> None:
        frames.install()  # a message pamqp cannot decode must cost that message, not the connection
        # The copies' connection (see copies.py); the consuming one if none is given (tests).
        publish_link = publish_link or link
        limits = limits or LimitsConfig()
        self._log = log = logger or logging.getLogger("jobq.rabbitmq")
        self._warning = consumer_timeout_warning(  # said at open (the start-up check)
            consumer_timeout=settings.consumer_timeout, job_timeout=job_timeout,
            prefetch=prefetch, concurrency=concurrency) if concurrency else None
        self._topology = topology = Topology.configured(settings, queue, limits.max_pending)
        # A classic queue that recovers from a crash of its broker hands out all it held as
        # redelivered: a first redelivery there runs again, marked (crashes.py); quorum queues
        # count real deliveries. Not with limits.max_pending: a full work queue would refuse
        # the copy, and the original, handed back, would come straight back to be copied again.
        self._rules = rules = Rules(queue, max_attempts, limits, settings.default_kind,
                                    strikes=topology.queue_type == "classic"
                                    and not limits.max_pending)
        self._state = state = State()
        self._inbox = inbox = Inbox()
        self._tasks = tasks = Background()
        self._tombstones = Tombstones(link, topology)  # cancelled jobs' ids (jobq jobs cancel)
        self._mourner: asyncio.Task[None] | None = None  # reads them (Tombstones.watch)
        alone = AloneQueue(topology.alone, settings.publish_timeout)
        copier = Copier(publish_link, settings.publish_timeout,
                        bounded=queue if limits.max_pending else "")
        self._forwarder = forwarder = Forwarder(copier, publish_link, alone, queue=queue,
                                                state=state, tasks=tasks, log=log)
        self._settler = Settler(forwarder, topology, alone, inbox=inbox, state=state)
        self._sessions = Supervisor(
            link, publish_link, topology, settings, prefetch=prefetch, state=state, inbox=inbox,
            tombstones=self._tombstones, tasks=tasks, on_message=self._on_message,
            on_session=self._on_session, log=log)
        self._solo = RunAlone(alone, self._sessions, forwarder, rules=rules, topology=topology,
                              settings=settings, inbox=inbox, state=state,
                              tombstones=self._tombstones, tasks=tasks, log=log)

    def health(self) -> Health:
        """Connected while a session is consuming (not from a lost one until it resumes);
        stale settles, reconnects and jobs acked unrun as cancelled (exported as metrics)."""
        state = self._state
        return Health(self._sessions.resumed.is_set(), {
            "stale": state.stale, "reconnects": state.reconnects,
            "acks_not_written": state.acks_not_written,
            "cancelled_unrun": state.cancelled_unrun}, self._tombstones.ids.keys())

    @property
    def blocked(self) -> bool:
        """True while the broker blocks the copies' connection (exported as jobq_broker_blocked)."""
        return self._forwarder.blocked

    async def open(self) -> None:
        """Declare the topology and start consuming; keep doing so across reconnects."""
        if self._warning:
            self._log.warning("%s", self._warning)
        await self._sessions.open()
        self._mourner = asyncio.create_task(self._tombstones.watch(self._log),
                                            name="jobq-rmq-tombstones")

    async def close(self) -> None:
        """Stop consuming, hand back what never reached the pool, flush acks, close channels."""
        state = self._state
        state.close()
        await self._sessions.stop()
        await self._solo.stop()
        if self._mourner is not None:
            await cancelled(self._mourner)
        session = self._sessions.current
        if session is not None and session.alive and (session.consumer_tag is not None
                                                      or self._inbox.arrived):  # not quiesced
            await self._stop_consuming(session)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if session is not None:
            await session.finish()
        if self._forwarder.held_back:
            self._log.warning("%d copies held while the broker blocked publishing were not sent; "
                              "the broker delivers those jobs again", self._forwarder.held_back)
        if state.stale:
            self._log.info("%d settles were for deliveries of a lost connection; the broker "
                           "delivers those jobs again", state.stale)

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
        while self._inbox.arrived and session.alive:
            await self._forwarder.give_back_quietly(self._inbox.arrived.popleft())
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
        state = self._state
        if paused == state.paused:
            return
        state.paused = paused
        if paused:
            state.let_go.set()  # what _not_yet holds goes back too, not into a paused buffer
        elif not state.closing:
            state.let_go.clear()
        session = self._sessions.current
        if session is None or not session.alive:
            return  # the next session consumes or not as the state says
        if paused:
            await self._stop_consuming(session)
        elif session.consumer_tag is None:
            try:
                await self._sessions.subscribe(session)
            except TransportError as exc:
                session.end(f"consume after the resume failed: {describe(exc)}")

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Up to ``max_count`` deliveries that arrived; wait up to ``timeout`` for the first.

        While ``<q>.alone`` holds copies and none is out, one of them first (see solos.py).
        """
        solo, arrived = self._solo, self._inbox.arrived
        if solo.turn():
            taken = await solo.receive(timeout)
            if taken is not None:
                return taken
        if not arrived:
            await self._wait(timeout)
            if not arrived and solo.turn():  # woken for <q>.alone
                return await solo.receive(timeout) or []
        return self._inbox.take(max_count)

    async def _wait(self, timeout: float) -> None:
        """Until something arrives, ``<q>.alone`` can be taken from, or ``timeout`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stalled_since: float | None = None
        inbox, solo = self._inbox, self._solo
        while not inbox.arrived and not solo.turn():
            session = self._sessions.current
            if session is None or not session.alive:
                await self._sessions.live(timeout)
                continue
            await inbox.sleep(deadline)
            if inbox.arrived or solo.turn() or loop.time() < deadline:
                continue
            # A silent drain probe (--once): while the queue still holds ready messages (or
            # cannot say), wait for them another drain_timeout, and again, up to DRAIN_STALL.
            # Giving up after one more (as before) ended a --once drain of a 1,000,000-job
            # quorum queue with 690,257 jobs left, after a one-second lull in deliveries.
            if timeout != DRAIN_TIMEOUT:
                return  # only an idle --once pool asks "drained?" (jobq.worker.fetcher.Asking)
            ready = await solo.ready_count(session)
            if not ready and not self._forwarder.copying:  # a copy being sent is not counted
                return
            stalled_since = loop.time() if stalled_since is None else stalled_since
            if loop.time() - stalled_since > DRAIN_STALL:
                self._log.warning("queue %r still holds %d ready messages, but none came for "
                                  "%gs: ending the drain (--once) with them left",
                                  self._topology.queue, ready, DRAIN_STALL)
                return
            deadline = loop.time() + DRAIN_TIMEOUT

    def _on_session(self, session: Session) -> None:
        """A new session is in place: look at ``<q>.alone`` while it lives."""
        self._solo.watch(session)

    async def _on_message(self, session: Session, message: DeliveredMessage) -> None:
        """A delivery from basic.consume: handed out, held or sent on, or copied forward."""
        if not session.alive:
            return
        deliver: Any = message.delivery  # Deliver: it has the tag
        arrival = classify(message.body, message.header.properties,
                           redelivered=deliver.redelivered,
                           handle=Handle(session, deliver.delivery_tag, message),
                           rules=self._rules, cancelled=self._tombstones.ids, clock=time.time)
        delivery = arrival.delivery
        if arrival.due is not None:
            self._tasks.spawn(self._not_yet(delivery, arrival.due))
        elif arrival.copy is not None:
            self._forwarder.copy_later(delivery, arrival.copy)
        else:
            if isinstance(delivery.fact, CancelRequested):
                self._state.cancel_requested(delivery, self._log)
            self._inbox.arrive(delivery)

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
                await self._forwarder.forward(delivery, "", tier, {})
            return
        state = self._state
        while wait > 0 and not state.let_go.is_set():  # a timer may fire a hair early: never early
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait + HOLD_MARGIN):
                    await state.let_go.wait()
            wait = due - time.time()
        if not delivery.handle.session.alive:
            return
        if state.closing or state.paused:
            await self._forwarder.give_back_quietly(delivery)
            return
        if delivery.job.id in self._tombstones:  # cancelled while it was held
            self._state.cancel_requested(delivery, self._log)
        self._inbox.arrive(delivery)

    def settle(self, delivery: Delivery, decision: Decision) -> Coroutine[Any, Any, None]:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``; the settle's
        own coroutine, not one wrapped around it: an ack is on every job's path)."""
        return carry_out(self._settler, delivery, decision)
