"""``jobq move`` on RabbitMQ: a queue's messages handed over in batches, or published in.

Out: the queues read with basic.get on a channel of their own (the work queue, ``<q>.alone``
and the retry tiers for waiting jobs; ``<q>.dead`` for dead ones); each batch is acked only
once the other backend committed it. What is not moved (another kind, a message that is not a
job) stays unacked and goes back when the channel closes. So the queue's consumers must be
stopped (a consuming queue is refused), and ``--kind`` applies to dead jobs only: the tiers
and a quorum work queue count every message put back as a delivery, which jobq reads as a
crash. In: each job published with confirms, keeping its id (message_id), its attempts,
what is left of its delay (``x-jobq-due``, through the tiers), its priority and its last
error; a dead one straight into ``<q>.dead`` with the dead letter's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from jobq.config import LimitsConfig, RabbitConfig
from jobq.core.errors import ConfigError
from jobq.core.within import within
from jobq.feeds.move import MovedJob, MoveReport, Send
from jobq.transports.rabbitmq import frames
from jobq.transports.rabbitmq.codec import (
    ATTEMPT,
    ATTEMPTS_USED,
    DEAD_AT,
    DUE,
    ENQUEUED_AT,
    ERROR,
    MAX_ATTEMPTS,
    due_at,
    due_ms,
)
from jobq.transports.rabbitmq.codec import decode as decode_message
from jobq.transports.rabbitmq.connect import RabbitLink, short_channel, translated
from jobq.transports.rabbitmq.dead_rows import dead_at, dead_row
from jobq.transports.rabbitmq.topology import Topology

LAST_ERROR = "x-jobq-last-error"
WINDOW = 256  # publishes awaiting their confirms at once


class RabbitMoves:
    """Move jobs of one queue out of, or into, its RabbitMQ topology."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str, max_attempts: int,
                 limits: LimitsConfig, logger: logging.Logger | None = None) -> None:
        frames.install()
        self._link = link
        self._cfg = settings
        self._queue = queue
        self._max_attempts = max_attempts
        self._limits = limits
        self._topology = Topology.configured(settings, queue, limits.max_pending)
        self._log = logger or logging.getLogger("jobq.move")

    async def open(self) -> None:
        """Declare the topology (idempotent), as `jobq init` does."""
        async with self._channel(confirms=False) as channel:
            await self._topology.declare(channel)

    async def move_out(self, state: str, kind: str | None, batch: int, send: Send,
                       report: MoveReport) -> None:
        """Every message of ``state``'s queues, ``batch`` at a time, acked once ``send`` returned."""
        t = self._topology
        if state == "pending" and kind is not None:
            raise ConfigError("on RabbitMQ --kind moves dead jobs only (--state dead): the jobs "
                              "of other kinds would go back to the queue, and a quorum queue "
                              "(the retry tiers are) counts that as a delivery, which jobq reads "
                              "as a crash", key="--kind")
        async with self._channel(confirms=False) as channel:
            work = await channel.declare_queue(t.queue, passive=True)
            consumers = int(work.declaration_result.consumer_count or 0)
        if consumers:
            raise ConfigError(f"queue {t.queue!r} has {consumers} consumer(s): stop them before "
                              "moving its jobs (they hold messages a move cannot see)",
                              key="--from")
        names = [t.dead] if state == "dead" else [t.alone, t.queue, *map(t.tier_name, t.tiers)]
        for name in names:
            await self._drain(name, state == "dead", kind, batch, send, report)

    async def _drain(self, name: str, dead: bool, kind: str | None, batch: int, send: Send,
                     report: MoveReport) -> None:
        async with self._channel(confirms=False) as channel:
            queue = await channel.declare_queue(name, passive=True)
            taken: list[tuple[AbstractIncomingMessage, MovedJob]] = []
            while (message := await queue.get(no_ack=False, fail=False)) is not None:
                job = self._job(message, dead)
                if job is None:
                    report.left += 1
                    continue
                if kind is not None and job.kind != kind:
                    continue
                taken.append((message, job))
                if len(taken) >= batch:
                    await self._hand_over(taken, send)
                    taken = []
            if taken:
                await self._hand_over(taken, send)

    @staticmethod
    async def _hand_over(taken: list[tuple[AbstractIncomingMessage, MovedJob]],
                         send: Send) -> None:
        await send([job for _, job in taken])
        for message, _ in taken:
            await message.ack()

    def _job(self, message: AbstractIncomingMessage, dead: bool) -> MovedJob | None:
        """The job a message carries; None (left, logged) for one that is not a job."""
        props: Any = message.properties
        job, problem = decode_message(message.body, props, queue=self._queue,
                                      max_attempts=self._max_attempts, limits=self._limits,
                                      default_kind=self._cfg.default_kind)
        if problem and not (dead and isinstance(job.payload, dict) and job.kind):
            self._log.warning("message %s of queue %r left where it is: %s", job.id, self._queue,
                              problem)
            return None
        headers = message.headers or {}
        due = None if dead else due_at(props)
        priority = props.priority if type(props.priority) is int else 0
        if dead:
            row = dead_row(message)
            return MovedJob(id=job.id, kind=job.kind, payload=job.payload, headers=job.headers,
                            attempts=row.attempts or job.attempt, max_attempts=job.max_attempts,
                            last_error=row.last_error, dead=True, finished_at=dead_at(message),
                            priority=min(priority, 9))
        error = headers.get(LAST_ERROR)
        return MovedJob(id=job.id, kind=job.kind, payload=job.payload, headers=job.headers,
                        attempts=max(0, job.attempt - 1), max_attempts=job.max_attempts,
                        run_at=None if due is None else datetime.fromtimestamp(due, UTC),
                        last_error=None if error is None else str(error),
                        priority=min(priority, 9))

    async def move_in(self, jobs: Sequence[MovedJob], report: MoveReport) -> None:
        """Publish every job, WINDOW confirms at a time; raise if any is not confirmed."""
        t = self._topology
        async with self._channel(confirms=True) as channel:
            for start in range(0, len(jobs), WINDOW):
                await asyncio.gather(*(self._publish(channel, t, job)
                                       for job in jobs[start:start + WINDOW]))

    async def _publish(self, channel: AbstractChannel, t: Topology, job: MovedJob) -> None:
        now = datetime.now(UTC)
        headers: dict[str, Any] = {str(k): str(v) for k, v in job.headers.items()}
        headers[MAX_ATTEMPTS] = job.max_attempts
        headers[ENQUEUED_AT] = math.floor(now.timestamp() * 1000)
        if job.dead:
            headers.update({ATTEMPT: max(1, job.attempts), ATTEMPTS_USED: job.attempts,
                            ERROR: job.last_error or "dead (moved from PostgreSQL)",
                            DEAD_AT: (job.finished_at or now).isoformat()})
            exchange, key = "", t.dead
        else:
            headers[ATTEMPT] = job.attempts + 1
            if job.last_error:
                headers[LAST_ERROR] = job.last_error
            wait = 0.0 if job.run_at is None else (job.run_at - now).total_seconds()
            tier = None
            if job.run_at is not None and wait > 0:
                headers[DUE] = due_ms(job.run_at.timestamp())
                tier = t.hop(wait)
            exchange, key = ("", tier) if tier else (self._cfg.exchange, t.queue)
        message = aio_pika.Message(
            json.dumps(dict(job.payload), separators=(",", ":")).encode(),
            message_id=job.id, type=job.kind, timestamp=now, headers=headers,
            content_type="application/json", delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            priority=job.priority or None)
        target = channel.default_exchange if not exchange else await channel.get_exchange(
            exchange, ensure=False)
        with translated(f"rabbitmq move to {key}"):
            await within(target.publish(message, routing_key=key, mandatory=True),
                                   self._cfg.publish_timeout)

    def _channel(self, *, confirms: bool) -> contextlib.AbstractAsyncContextManager[AbstractChannel]:
        return short_channel(self._link, confirms=confirms, what="rabbitmq move")
