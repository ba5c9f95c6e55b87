"""The consumer's connection supervisor: starts a session (channels, declare, prefetch,
basic.consume), notices when it is lost, and starts another with backoff.

A lost connection or channel, a failed ack or publish, or a consumer that cannot be
re-subscribed ends the session: buffered deliveries are dropped, later settles of its
deliveries are ignored (the broker redelivers those messages), and the supervisor reconnects
both links (the consuming one and the copies', see copies.py), re-declares and consumes again.
A consumer the broker cancels (queue deleted, leader moved) re-declares and subscribes again
on the same channel. While the queue is paused a new session does not subscribe (``State``).
Resource alarms are not the supervisor's: the copies wait them out (forwarding.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiormq.abc import DeliveredMessage

from jobq.config import RabbitConfig
from jobq.core.errors import ConfigError, ConnectionLost, TransportError, describe
from jobq.core.within import Deadline, cancelled
from jobq.transports.rabbitmq.connect import RabbitLink, translated
from jobq.transports.rabbitmq.session import Session, silent_limit
from jobq.transports.rabbitmq.state import Background, Inbox, State
from jobq.transports.rabbitmq.tombstones import Tombstones
from jobq.transports.rabbitmq.topology import Topology

RESUME_WAIT = 5.0  # a receive while reconnecting waits this long before reporting it
RESUME_POLL = 0.05  # a session that ended before the supervisor noticed: look again this often
WATCH = 1.0  # the supervisor looks at the session's channels this often (see _until_lost)

OnMessage = Callable[[Session, DeliveredMessage], Coroutine[Any, Any, None]]


class Supervisor:
    """One consumer's sessions: the current one, and a task that replaces it when it is lost."""

    def __init__(self, link: RabbitLink, publish_link: RabbitLink, topology: Topology,
                 settings: RabbitConfig, *, prefetch: int, state: State, inbox: Inbox,
                 tombstones: Tombstones, tasks: Background, on_message: OnMessage,
                 on_session: Callable[[Session], None], log: logging.Logger) -> None:
        self._link = link
        self._publish_link = publish_link
        self._topology = topology
        self._cfg = settings
        self._prefetch = prefetch
        self._state = state
        self._inbox = inbox
        self._tombstones = tombstones
        self._tasks = tasks
        self._on_message = on_message  # basic.consume's callback, for each delivery
        self._on_session = on_session  # a new session is in place
        self._log = log
        self.current: Session | None = None
        self.resumed = asyncio.Event()  # set while a session is consuming
        self.task: asyncio.Task[None] | None = None  # supervise()

    async def open(self) -> None:
        """Start the first session, then supervise it and its successors."""
        await self.start()
        self.task = asyncio.create_task(self.supervise(), name="jobq-rmq-supervisor")

    async def stop(self) -> None:
        """Stop supervising (the session stays: close() finishes it). A cancel that aio-pika
        loses (3.11's ``wait_for`` drops one landing as its call completes) is sent again."""
        if self.task is not None:
            await cancelled(self.task)

    async def start(self) -> None:
        """Open channels on the links, declare, set the prefetch and consume."""
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
                          ack_batch=max(1, self._prefetch // 2), logger=self._log,
                          silent_limit=silent_limit(self._cfg.heartbeat))
        # aiormq awaits this callback inside the channel's frame reader (and awaits what it
        # returns): anything that waits for a reply on the channel must run as a task it is
        # not given, or it waits for itself.
        raw.on_consumer_cancel_callbacks.add(
            lambda _frame: self._tasks.start(self._resubscribe(session)))
        await self._consume(session)
        self._log.info("%s %r on RabbitMQ at %s (%s queue, prefetch %d)",
                       "connected (paused) to" if self._state.paused else "consuming",
                       topology.queue, link.address, topology.queue_type, self._prefetch)

    async def _consume(self, session: Session) -> None:
        """Subscribe (unless paused) and make ``session`` the current one."""
        try:
            if not self._state.paused:
                await self.subscribe(session)
        except BaseException:
            await session.close()
            raise
        self.current = session
        self._on_session(session)
        self.resumed.set()

    async def subscribe(self, session: Session) -> None:
        """basic.consume on the session's channel: deliveries go to ``on_message``."""
        with translated("rabbitmq consume"):
            ok = await session.raw.basic_consume(self._topology.queue,
                                                 functools.partial(self._on_message, session))
        session.consumer_tag = ok.consumer_tag

    async def _resubscribe(self, session: Session) -> None:
        """The broker cancelled our consumer (queue deleted, leader moved): consume again."""
        state = self._state
        if not session.alive or state.closing or state.paused:
            return
        self._log.warning("consumer cancelled by the broker; declaring and subscribing again")
        try:
            with translated("rabbitmq re-declare"):
                await self._topology.declare_consuming(
                    session.consume, lambda: self._link.channel(confirms=False))
            await self.subscribe(session)
        except (TransportError, ConfigError) as exc:
            session.end(f"re-subscribe failed: {describe(exc)}")

    async def supervise(self) -> None:
        """Wait for the session to end; then reconnect with backoff and start a new one."""
        backoff = self._link.connect_config.backoff()
        while True:
            session = self.current
            assert session is not None
            await self._until_lost(session)
            self.resumed.clear()
            dropped = self._inbox.drop()
            self._log.warning("lost the RabbitMQ session (%s); %d buffered deliveries dropped "
                              "(the broker redelivers them); reconnecting", session.reason,
                              dropped)
            await session.close()
            async for attempt in backoff.attempts():
                try:
                    for link in dict.fromkeys((self._link, self._publish_link)):
                        if not link.is_open or attempt.number > 1:
                            await link.reopen()
                    await self.start()
                    break
                except Exception as exc:  # whatever it is, the supervisor must go on reconnecting
                    self._log.warning("could not resume consuming (%s); retrying in %.1fs",
                                      describe(exc), attempt.delay)
            self._state.reconnects += 1

    async def _until_lost(self, session: Session) -> None:
        """Until the session ends, or its channels or connection turn out closed.

        The close callbacks normally end it; the look every WATCH seconds is for a loss
        nothing reported (a callback that never ran), so no loss goes unnoticed for long.
        """
        while not session.lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with Deadline(WATCH):
                    await session.lost.wait()
            if session.broken() or not (self._link.is_open and self._publish_link.is_open):
                session.end(session.reason or "channel or connection found closed")

    async def live(self, timeout: float) -> None:
        """Wait for a live session; ConnectionLost if none comes within ``timeout`` (at least
        RESUME_WAIT).

        Waiting here (rather than failing at once) keeps the pool from piling up receive
        failures, whose backoff would otherwise idle it long after the broker is back.

        ``resumed`` is still set for a moment after a session ends (until the supervisor
        runs): a set event's wait() returns without yielding, so the wait is for a live
        session, with a real sleep meanwhile. (Seen in the fault suite: a session ended by a
        failed basic.get, the receive loop spun on the set event, the supervisor never ran
        again and SIGTERM could not end the process.)
        """
        try:
            async with Deadline(max(timeout, RESUME_WAIT)):
                while True:
                    await self.resumed.wait()
                    session = self.current
                    if session is not None and session.alive:
                        return
                    await asyncio.sleep(RESUME_POLL)
        except TimeoutError:
            raise ConnectionLost(f"not connected to RabbitMQ at {self._link.address} "
                                 "(reconnecting)") from None
