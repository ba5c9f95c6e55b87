"""The consumer's suspects: the copies in ``<q>.alone`` (see alone.py), taken one at a time.

A crash redelivery is not run but copied to ``<q>.alone`` (on a classic queue: its second; the
first goes back to the work queue marked, see crashes.py), which no one subscribes to. While
it holds copies, the consumer takes them one at a time with basic.get, the next once the one
before it settled and its ack went out, and hands each out beside the work of the work queue,
which goes on: a crash while one is out is charged to it (docs/architecture.md, "Crashes").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from jobq.config import RabbitConfig
from jobq.core.errors import ConnectionLost, TransportError, describe
from jobq.core.job import CancelRequested, Delivery
from jobq.core.looks import uncut
from jobq.core.within import cancelled
from jobq.transports.rabbitmq.alone import POLL, AloneQueue
from jobq.transports.rabbitmq.codec import MARKS
from jobq.transports.rabbitmq.connect import translated
from jobq.transports.rabbitmq.forwarding import Forwarder
from jobq.transports.rabbitmq.inbound import Rules, classify
from jobq.transports.rabbitmq.session import Handle, Session
from jobq.transports.rabbitmq.state import Background, Inbox, State
from jobq.transports.rabbitmq.supervisor import Supervisor
from jobq.transports.rabbitmq.tombstones import Tombstones
from jobq.transports.rabbitmq.topology import Topology

ACK_POLLS = 50  # before the next suspect: ack_intervals to wait for the acks owed


class RunAlone:
    """Takes one consumer's copies from ``<q>.alone``, one out at a time."""

    def __init__(self, alone: AloneQueue, sessions: Supervisor, forwarder: Forwarder, *,
                 rules: Rules, topology: Topology, settings: RabbitConfig, inbox: Inbox,
                 state: State, tombstones: Tombstones, tasks: Background,
                 log: logging.Logger) -> None:
        self.alone = alone
        self._sessions = sessions
        self._forwarder = forwarder
        self._rules = rules
        self._topology = topology
        self._settings = settings  # ack_interval, publish_timeout
        self._inbox = inbox
        self._state = state
        self._tombstones = tombstones
        self._tasks = tasks
        self._log = log
        self._watcher: asyncio.Task[None] | None = None  # looks at <q>.alone (_watch)

    def takes(self) -> bool:
        """True while ``<q>.alone`` holds copies and a live session can take them.

        Never while reconnecting or closing: receive would then return at once, and the pool,
        asking again at once, would spin and starve the event loop (the supervisor included).
        """
        session = self._sessions.current
        return (self.alone.due and not self._state.closing and session is not None
                and session.alive)

    def turn(self) -> bool:
        """True when the next receive takes a copy: there are some, and none is out."""
        return self.takes() and self.alone.out is None

    async def receive(self, timeout: float) -> list[Delivery] | None:
        """The next copy from ``<q>.alone`` (``turn`` said so); None once it is empty.

        The work queue's deliveries go on being handed out beside it; if the process dies
        while it is out, they come back refunded, it charged.
        """
        session = self._sessions.current
        if session is None or not session.alive:
            return None
        # Copies still being made, and acks owed, first: an original not yet acked when this
        # run kills the process would come back too, and be copied (or charged) again.
        if self._forwarder.copying:
            await asyncio.shield(asyncio.gather(*self._forwarder.copying))
        wanted = [True]  # False once this receive is cancelled (shutdown)
        taking = self._tasks.spawn(self.take(session, wanted))
        try:
            delivery = await asyncio.shield(taking)
        except asyncio.CancelledError:
            wanted[0] = False  # a copy the take still gets, it gives back
            if taking.done() and not taking.cancelled() and taking.exception() is None:
                taken = taking.result()
                if taken is not None:  # taken as the cancel came: back to <q>.alone
                    self._tasks.spawn(self._forwarder.give_back_quietly(taken))
            raise
        if delivery is None:
            return None
        self._inbox.out += 1
        self.alone.out = delivery.handle
        return [delivery]

    async def take(self, session: Session, wanted: list[bool]) -> Delivery | None:
        """basic.get until a copy is to run (crashed ones charged or buried on the way); None
        once ``<q>.alone`` is empty or the session ended.

        A task of its own, which a cancelled receive does not cancel: a basic.get cancelled
        half-way closes the channel when its answer comes (aiormq has no getter for it), and a
        copy forwarded half-way would be forwarded twice. A copy taken for a receive that was
        cancelled meanwhile goes back to ``<q>.alone``, mark and attempt kept.
        """
        while session.alive and not self._state.closing:
            await self._acks_sent(session)
            try:
                message = await self.alone.take(session.raw)
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
                               clock=time.time, alone=True)
            delivery = arrival.delivery
            if arrival.due is not None:
                # Not due yet: it never ran (an early message is never handed out), so no crash
                # was its own, however often it was delivered: back through the hops, unmarked.
                tier = self._topology.hop(arrival.due - time.time())
                with contextlib.suppress(TransportError):
                    await self._forwarder.forward(delivery, "", tier or self._topology.queue, {},
                                                  drop=MARKS)
                continue
            if arrival.copy is not None:  # crashed while it ran alone: charged
                await self._forwarder.copy_forward(delivery, arrival.copy)
                continue
            if isinstance(delivery.fact, CancelRequested):  # settled unrun, as from the work queue
                self._state.cancel_requested(delivery, self._log)
            if not wanted[0]:
                await self._forwarder.give_back_quietly(delivery)
                return None
            return delivery
        return None

    async def _acks_sent(self, session: Session) -> None:
        """Until the acks owed now are sent (the ack loop sends within ack_interval): the last
        suspect's and those of the originals copied to ``<q>.alone``. Should the process die
        before, they would come back, the suspect charged a crash it did not cause, an
        original copied (charged) twice. Acks owed later, of the work beside, need not wait."""
        owed = session.tracker.unsent_now()
        for _ in range(ACK_POLLS):
            if not (owed and session.alive and session.tracker.any_unsent(owed)):
                return
            await asyncio.sleep(self._settings.ack_interval)

    async def ready_count(self, session: Session) -> int:
        """Ready messages in the work queue and ``<q>.alone`` (``due`` set if it holds any)."""
        try:
            # On the consuming connection: a blocked one reads nothing, not even a declare.
            with translated("rabbitmq queue depth"):  # never cut: see AloneQueue.count
                queue = await uncut(session.consume.declare_queue(
                    self._topology.queue, passive=True, timeout=self._settings.publish_timeout))
            alone = await self.alone.count(session.consume)
        except (TransportError, TimeoutError):
            return 1  # cannot tell: not drained as far as we know
        self.alone.due = self.alone.due or alone > 0
        return int(queue.declaration_result.message_count or 0) + alone

    def watch(self, session: Session) -> None:
        """Look at ``<q>.alone`` while ``session`` lives (a new session's watch replaces it)."""
        self._watcher = asyncio.create_task(self._watch(session), name="jobq-rmq-alone")

    async def stop(self) -> None:
        """Stop looking at ``<q>.alone``."""
        if self._watcher is not None:
            await cancelled(self._watcher)

    async def _watch(self, session: Session) -> None:
        """Look at ``<q>.alone`` now and every POLL seconds; ``due`` (and a wake) when it holds any.

        A failed look ends nothing: the supervisor watches the session.
        """
        while session.alive and not self._state.closing:
            if not self.alone.due:
                with contextlib.suppress(TransportError):
                    if await self.alone.count(session.consume):
                        self.alone.due = True
                        self._inbox.wake()
            await asyncio.sleep(POLL)
