"""RabbitMQ transport: prefetch as backpressure, ack on success in batches, retry tiers, DLX.

Deliveries arrive pushed (basic.consume, prefetch = the pool's concurrency plus buffer) into a
local list that ``receive`` hands out. Settling:

- ack: batched per channel (see rmq_acks), on the delivery's own channel;
- retry: publish a copy to the retry tier for the delay (confirmed), then ack the original;
- dead-letter: publish a copy with the reason in its headers to ``<q>.dlx`` -> ``<q>.dead``
  (confirmed), then ack;
- release: publish a copy with the attempt header unchanged back to the work queue (confirmed),
  then ack. Not a nack with requeue: quorum queues count that as a delivery
  (``x-delivery-count``), classic ones set ``redelivered``, and either would count an attempt.
  The price: the released job goes to the back of the queue.

A lost connection or channel ends the session: buffered deliveries are dropped, later settles
of its deliveries are ignored (the broker redelivers those messages, counting an attempt), and
a supervisor reconnects with backoff, re-declares and consumes again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from aiormq.abc import DeliveredMessage

from jobq.backoff import Backoff
from jobq.config import LimitsConfig, RabbitConfig
from jobq.errors import ConfigError, ConnectionLost, TransportError, describe
from jobq.job import Delivery
from jobq.transports.rabbitmq.codec import ATTEMPT, republish
from jobq.transports.rabbitmq.codec import decode as decode_message
from jobq.transports.rabbitmq.connect import RabbitLink, translated
from jobq.transports.rabbitmq.session import Handle, Session
from jobq.transports.rabbitmq.topology import Topology

QUIET = 0.05  # at close: time for deliveries made room for by the last acks to arrive
RESUME_WAIT = 5.0  # a receive while reconnecting waits this long before reporting it


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RabbitTransport:
    """Consumer of one jobq queue on RabbitMQ."""

    name = "rabbitmq"
    # An idle consumer with free prefetch gets a ready message within milliseconds; half a
    # second of silence (confirmed by the queue's ready count) means drained.
    drain_timeout = 0.5

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str, prefetch: int,
                 max_attempts: int, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None) -> None:
        self._link = link
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._queue = queue
        self._prefetch = prefetch
        self._max_attempts = max_attempts
        self._topology = Topology.configured(settings, queue, self._limits.max_pending)
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._arrived: collections.deque[Delivery] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None  # a receive waiting for a delivery
        self._resumed = asyncio.Event()  # set while a session is consuming
        self._session: Session | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self.stale = 0  # settles dropped because their session had ended
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        """True while a session is consuming; False from a lost one until it resumes."""
        return self._resumed.is_set()

    def counters(self) -> dict[str, int]:
        """Stale settles and reconnects (exported as metrics)."""
        return {"stale": self.stale, "reconnects": self.reconnects}

    async def open(self) -> None:
        """Declare the topology and start consuming; keep doing so across reconnects."""
        await self._start_session()
        self._supervisor = asyncio.create_task(self._supervise(), name="jobq-rmq-supervisor")

    async def close(self) -> None:
        """Stop consuming, hand back what never reached the pool, flush acks, close channels."""
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        session = self._session
        if session is not None and session.alive:
            await self._stop_consuming(session)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if session is not None:
            await session.finish()
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
        session.holding = True
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, session.last_ack + QUIET - loop.time()))
        await session.cancel_consumer()
        for _ in range(3):  # deliveries read before the cancel-ok run as aiormq tasks: let them land
            await asyncio.sleep(0)
        while self._arrived and session.alive:
            with contextlib.suppress(TransportError):
                await self.release(self._arrived.popleft())
        session.holding = False

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Up to ``max_count`` deliveries that arrived; wait up to ``timeout`` for the first."""
        arrived = self._arrived
        if not arrived:
            await self._wait(timeout)
        n = min(max_count, len(arrived))
        return [arrived.popleft() for _ in range(n)]

    async def ack(self, delivery: Delivery) -> None:
        """Ack with the next batch, on the delivery's own channel."""
        handle: Handle = delivery.handle
        if handle.session.alive:
            handle.session.complete(handle.tag)
        else:
            self.stale += 1

    async def retry(self, delivery: Delivery, delay: float, reason: str) -> None:
        """Publish to the tier for ``delay`` (confirmed), then ack the original."""
        job = delivery.job
        tier = self._topology.tier_for(delay)
        await self._forward(delivery, "", tier or self._queue, {
            ATTEMPT: job.attempt + 1, "x-jobq-max-attempts": job.max_attempts,
            "x-jobq-last-error": reason})

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Publish to ``<q>.dlx`` with the reason in the headers (confirmed), then ack."""
        job = delivery.job
        await self._forward(delivery, self._topology.dlx, self._queue, {
            ATTEMPT: job.attempt, "x-jobq-attempts": job.attempt,
            "x-jobq-max-attempts": job.max_attempts, "x-jobq-error": reason,
            "x-jobq-dead-at": datetime.now(UTC).isoformat(timespec="milliseconds")})

    async def release(self, delivery: Delivery) -> None:
        """Publish back to the work queue with the attempt uncounted (confirmed), then ack."""
        await self._forward(delivery, "", self._queue, {ATTEMPT: delivery.job.attempt})

    async def _forward(self, delivery: Delivery, exchange: str, routing_key: str,
                       headers: dict[str, Any]) -> None:
        handle: Handle = delivery.handle
        session = handle.session
        if not session.alive:
            self.stale += 1
            return
        raw = handle.message
        body, props = republish(raw.body, raw.header.properties, headers)
        try:
            with translated(f"rabbitmq publish to {routing_key}"):
                await session.sender.basic_publish(body, exchange=exchange, routing_key=routing_key,
                                                   properties=props, mandatory=True)
        except TransportError:
            # Not forwarded: give the original back now rather than pinning a prefetch slot;
            # the broker counts that delivery, as it would after a crash.
            await session.requeue(handle.tag)
            raise
        if session.alive:
            session.complete(handle.tag)
        else:
            self.stale += 1  # forwarded, but the original's ack is lost: it comes back too

    async def _wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        probed = False
        while not self._arrived:
            session = self._session
            if session is None or not session.alive:
                await self._await_resume(timeout)
                continue
            await self._sleep(deadline)
            if self._arrived or loop.time() < deadline:
                continue
            # A silent drain probe (--once): if the queue still holds ready messages, give them
            # one more drain_timeout to arrive before the pool believes it is drained.
            if probed or timeout < self.drain_timeout or not await self._ready_count(session):
                return
            probed = True
            deadline = loop.time() + self.drain_timeout

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
        """
        try:
            async with asyncio.timeout(max(timeout, RESUME_WAIT)):
                await self._resumed.wait()
        except TimeoutError:
            raise ConnectionLost(f"not connected to RabbitMQ at {self._link.address} "
                                 "(reconnecting)") from None

    async def _ready_count(self, session: Session) -> int:
        try:
            with translated("rabbitmq queue depth"):
                queue = await session.publish.declare_queue(self._queue, passive=True)
        except TransportError:
            return 1  # cannot tell: not drained as far as we know
        return int(queue.declaration_result.message_count or 0)

    async def _on_message(self, session: Session, message: DeliveredMessage) -> None:
        if not session.alive:
            return
        deliver: Any = message.delivery
        tag: int = deliver.delivery_tag
        job, problem = decode_message(message.body, message.header.properties,
                                      redelivered=deliver.redelivered, queue=self._queue,
                                      max_attempts=self._max_attempts, fallback_id=f"amqp-{tag}",
                                      limits=self._limits)
        delivery = Delivery(job=job, handle=Handle(session, tag, message), malformed=problem)
        if problem is None and job.attempt > job.max_attempts:
            self._spawn(self._exhausted(delivery))
            return
        self._arrived.append(delivery)
        if self._waiter is not None:
            _resolve(self._waiter)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background; close() waits for it."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exhausted(self, delivery: Delivery) -> None:
        """Crash redeliveries used up the attempts: dead-letter without running (like a rescue)."""
        job = delivery.job
        reason = (f"lost mid-job on its last attempt: delivered {job.attempt} times, "
                  f"max_attempts {job.max_attempts} (the consumer crashed or was killed each time)")
        self._log.warning("job %s: %s; dead-lettered", job.id, reason)
        try:
            await self.dead_letter(delivery, reason)
        except TransportError as exc:
            self._log.error("could not dead-letter job %s (%s)", job.id, describe(exc))

    async def _start_session(self) -> None:
        """Open channels on the link, declare, set the prefetch and consume."""
        link, topology = self._link, self._topology
        consume = await link.channel(confirms=False)
        try:
            with translated("rabbitmq declare"):
                await topology.declare(consume)
                await consume.set_qos(prefetch_count=self._prefetch)
                publish = await link.channel(confirms=True)
                sender = await publish.get_underlay_channel()
                raw = await consume.get_underlay_channel()
        except BaseException:
            with contextlib.suppress(Exception):
                await consume.close()
            raise
        session = Session(link.generation, consume, raw, publish, sender,
                          ack_interval=self._cfg.ack_interval,
                          ack_batch=max(1, self._prefetch // 2), logger=self._log)
        # aiormq awaits this callback inside the channel's frame reader: anything that waits
        # for a reply on the channel must run as a task, or it waits for itself.
        raw.on_consumer_cancel_callbacks.add(
            lambda _frame: self._spawn(self._resubscribe(session)))
        try:
            await self._subscribe(session)
        except BaseException:
            await session.close()
            raise
        self._session = session
        self._resumed.set()
        self._log.info("consuming %r on RabbitMQ at %s (%s queue, prefetch %d)", self._queue,
                       link.address, topology.queue_type, self._prefetch)

    async def _subscribe(self, session: Session) -> None:
        with translated("rabbitmq consume"):
            ok = await session.raw.basic_consume(self._queue,
                                                 functools.partial(self._on_message, session))
        session.consumer_tag = ok.consumer_tag

    async def _resubscribe(self, session: Session) -> None:
        """The broker cancelled our consumer (queue deleted, leader moved): consume again."""
        if not session.alive or self._closing:
            return
        self._log.warning("consumer cancelled by the broker; declaring and subscribing again")
        try:
            with translated("rabbitmq re-declare"):
                await self._topology.declare(session.consume)
            await self._subscribe(session)
        except (TransportError, ConfigError) as exc:
            session.end(f"re-subscribe failed: {describe(exc)}")

    async def _supervise(self) -> None:
        """Wait for the session to end; then reconnect with backoff and start a new one."""
        backoff = Backoff.from_connect(self._link.connect_config)
        while True:
            session = self._session
            assert session is not None
            await session.lost.wait()
            self._log.warning("lost the RabbitMQ session (%s); %d buffered deliveries dropped "
                              "(the broker redelivers them); reconnecting", session.reason,
                              len(self._arrived))
            self._resumed.clear()
            self._arrived.clear()
            self._wake()
            await session.close()
            async for attempt in backoff.attempts():
                try:
                    if not self._link.is_open or attempt.number > 1:
                        await self._link.reopen()
                    await self._start_session()
                    break
                except (TransportError, ConfigError) as exc:
                    self._log.warning("could not resume consuming (%s); retrying in %.1fs",
                                      describe(exc), attempt.delay)
            self.reconnects += 1
