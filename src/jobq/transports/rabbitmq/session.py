"""One connection's worth of consuming: its channels, its delivery tags and their batched acks.

A session ends for good when its connection or channel goes; the transport then starts a new
one. Deliveries remember their session, so a settle that arrives after the end is dropped:
its tag means nothing on any other channel (tags restart at 1), and the broker hands the
message out again by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

import aiormq
from aio_pika.abc import AbstractChannel
from aiormq.abc import AbstractChannel as RawChannel
from aiormq.abc import DeliveredMessage

from jobq.core.job import Delivery
from jobq.core.within import Deadline
from jobq.transports.rabbitmq.acks import AckTracker
from jobq.transports.rabbitmq.connect import LINK_ERRORS, describe_amqp

CANCEL_TIMEOUT = 5.0  # a broker that does not answer a basic.cancel is treated as lost
CLOSE_TIMEOUT = 2.0  # a channel or connection whose close gets no answer is left to die
_SEND_ERRORS: tuple[type[BaseException], ...] = (*LINK_ERRORS, aiormq.exceptions.AMQPError)


class Handle:
    """What settling one delivery needs: its session, tag and the message as received."""

    __slots__ = ("message", "session", "tag")

    def __init__(self, session: Session, tag: int, message: DeliveredMessage) -> None:
        self.session = session
        self.tag = tag
        self.message = message


BEAT = 0.5  # a session stamps the loop's time this often while it lives


def silent_limit(heartbeat: int) -> float:
    """How long the event loop may go without running before a session's deliveries are
    taken for lost: half the heartbeat (the broker closes a connection silent for about one;
    0 asks for aiormq's 60 s), never under two of the session's stamps."""
    return max(2 * BEAT, (heartbeat or 60) / 2)


class Silence:
    """When a session last stamped the time (every ``BEAT`` while it lives), and ``limit``."""

    __slots__ = ("at", "limit")

    def __init__(self, limit: float) -> None:
        self.at = time.monotonic()
        self.limit = limit


def gone(delivery: Delivery) -> bool:
    """``Delivery.lapsed`` of a RabbitMQ delivery: its channel closed (the broker has it back),
    or the event loop was kept from running past the silence's limit, after which the broker
    may have closed the connection before the consumer could read that it did."""
    session: Session = delivery.handle.session
    silence = session.silence
    return not session.alive or time.monotonic() - silence.at > silence.limit


class Session:
    """The consuming channel (no confirms), a confirming channel to publish on, and the acker."""

    def __init__(self, number: int, consume: AbstractChannel, raw: RawChannel,
                 publish: AbstractChannel, sender: RawChannel, *, ack_interval: float,
                 ack_batch: int, logger: logging.Logger, silent_limit: float = math.inf) -> None:
        self.silence = Silence(silent_limit)
        self.consume = consume
        self.raw = raw
        self.publish = publish
        self.sender = sender  # the aiormq channel under ``publish``: copies are published there
        self.alive = True
        self.stopping = False
        self.holding = False  # acks wait (they would make room for more deliveries)
        self.last_ack = 0.0  # loop time of the last ack sent
        self.lost = asyncio.Event()
        self.reason = ""
        self.consumer_tag: str | None = None
        self.tracker = AckTracker()
        self.wake = asyncio.Event()
        self._ack_interval = ack_interval
        self._ack_batch = ack_batch
        self._log = logger
        self.acker = asyncio.create_task(self._ack_loop(), name=f"jobq-rmq-acks-{number}")
        consume.close_callbacks.add(self._on_channel_close)
        publish.close_callbacks.add(self._on_channel_close)
        self._beat()

    def _beat(self) -> None:
        self.silence.at = time.monotonic()
        if self.alive:
            asyncio.get_running_loop().call_later(BEAT, self._beat)

    def complete(self, tag: int) -> None:
        """``tag`` is settled as far as jobq is concerned: ack it with the next batch."""
        tracker = self.tracker
        tracker.complete(tag)
        owed = tracker.owed
        if owed == 1 or owed >= self._ack_batch:  # arm the timer, or the batch is full
            self.wake.set()

    def hold_acks(self) -> None:
        """Send no ack until ``send_acks`` (each would make room for another delivery)."""
        self.holding = True

    def send_acks(self) -> None:
        """End ``hold_acks``: what was completed meanwhile goes out with the next batch.

        The ack loop is woken: it slept through the hold, and the completions made during it
        only wake it for the first one owed, so without this they waited for the next
        completion to wake it (a paused consumer may make none: its acks stayed unsent, and
        a quorum queue handed those deliveries out again once the consumer resumed)."""
        self.holding = False
        if self.tracker.waiting:
            self.wake.set()

    async def requeue(self, tag: int) -> None:
        """Give ``tag`` back to the queue now (nack, requeue); the broker counts a delivery."""
        if not self.alive:
            return
        try:
            await self.raw.basic_nack(tag, multiple=False, requeue=True, wait=False)
        except _SEND_ERRORS as exc:
            self.end(f"nack failed: {describe_amqp(exc)}")
            return
        self.tracker.settled_elsewhere(tag)
        self.wake.set()

    async def cancel_consumer(self) -> None:
        """basic.cancel: once it is answered, the broker sends this channel nothing more."""
        tag, self.consumer_tag = self.consumer_tag, None
        if tag is None or not self.alive:
            return
        try:
            await self.raw.basic_cancel(tag, timeout=CANCEL_TIMEOUT)
        except _SEND_ERRORS as exc:  # TimeoutError included
            self.end(f"cancel failed: {describe_amqp(exc)}")

    def broken(self) -> bool:
        """True when either channel is closed (whether or not its close was reported)."""
        return self.consume.is_closed or self.publish.is_closed

    def end(self, reason: str) -> None:
        """Mark the session over: nothing more is acked on it."""
        if self.alive:
            self.alive = False
            self.reason = reason
            self.lost.set()

    async def finish(self) -> None:
        """Graceful end: flush every ack still owed, then close both channels."""
        self.stopping = True
        self.wake.set()
        with contextlib.suppress(Exception):
            await self.acker
        await self.close()

    async def close(self) -> None:
        """Close both channels (the broker requeues whatever is still unacked)."""
        self.end(self.reason or "closed")
        self.acker.cancel()
        for channel in (self.consume, self.publish):
            if not channel.is_closed:
                # A dark link answers no channel.close: give up on it after CLOSE_TIMEOUT.
                with contextlib.suppress(Exception):
                    async with Deadline(CLOSE_TIMEOUT):
                        await channel.close()

    def _on_channel_close(self, _sender: Any, exc: BaseException | None) -> None:
        self.end(describe_amqp(exc) if exc is not None else "channel closed")

    async def _ack_loop(self) -> None:
        """Send acks in batches: at ``ack_batch`` owed, or ``ack_interval`` after the first.

        Fewer, larger acks are most of the speed at high rates (each is a frame and a send);
        at half the prefetch, the other half keeps the broker sending while the ack travels.
        """
        loop = asyncio.get_running_loop()
        due: float | None = None  # when whatever is owed gets acked, gap or not
        try:
            while self.alive:
                await self._sleep_until(due)
                if not self.alive:
                    return
                if self.holding and not self.stopping:
                    due = None
                    continue
                due = await self._flush(due, loop.time())
                if self.stopping:
                    return
        except _SEND_ERRORS as exc:
            self._log.warning("acks on a lost channel not sent (%s); those jobs come back by "
                              "redelivery", describe_amqp(exc))
            self.end(f"ack failed: {describe_amqp(exc)}")

    async def _sleep_until(self, due: float | None) -> None:
        """Wait for a wake-up, or until ``due``."""
        if due is None:
            await self.wake.wait()
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(due):
                    await self.wake.wait()
        self.wake.clear()

    async def _flush(self, due: float | None, now: float) -> float | None:
        """Send what is owed if the batch is full or its time is up; return the next due time."""
        tracker, raw = self.tracker, self.raw
        if not tracker.waiting:
            return None
        due = due or now + self._ack_interval
        final = self.stopping or now >= due
        if final or tracker.owed >= self._ack_batch:
            top = tracker.contiguous()
            if top is not None:
                await raw.basic_ack(top, multiple=True, wait=False)
            if final:
                for tag in tracker.stragglers():
                    await raw.basic_ack(tag, multiple=False, wait=False)
            self.last_ack = now
        return due if tracker.waiting else None
