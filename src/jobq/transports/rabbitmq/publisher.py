"""Enqueue jobs into RabbitMQ: persistent messages, publisher confirms, pipelined, returns raised.

Confirms are pipelined: a window of publishes is in flight at once and the broker confirms
them as it goes, instead of one round trip per message. ``mandatory`` is set, so a message no
queue would take comes back as an error instead of vanishing.

Every job is checked against the limits before anything is published. With
``limits.max_pending`` the work queue refuses publishes once full (x-max-length,
reject-publish): the refused messages are published again, with backoff, until they are
confirmed or the timeout passes; then QueueFull, carrying the ids that were accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiormq
from aio_pika.abc import AbstractChannel
from aiormq.abc import AbstractChannel as RawChannel

from jobq.backoff import QUEUE_FULL_BACKOFF
from jobq.config import LimitsConfig, RabbitConfig
from jobq.errors import ConnectionLost, QueueFull, TransportError
from jobq.transport import NewJob
from jobq.transports.rabbitmq.codec import Outgoing, encode_job, new_job_id
from jobq.transports.rabbitmq.connect import RabbitLink, describe_amqp, translated
from jobq.transports.rabbitmq.topology import Topology

WINDOW = 2000  # publishes awaiting their confirm at once


class RabbitPublisher:
    """Publisher for the RabbitMQ backend; declares each queue's topology on first use."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str,
                 max_attempts: int, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None) -> None:
        self._link = link
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._queue = queue
        self._max_attempts = max_attempts
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._channel: AbstractChannel | None = None
        self._raw: RawChannel | None = None  # the aiormq channel under it: publishes go there
        self._declared: set[str] = set()

    def topology(self, queue: str) -> Topology:
        """The topology ``queue`` is published into."""
        return Topology.configured(self._cfg, queue, self._limits.max_pending)

    async def open(self) -> None:
        """Declare the default queue's topology and open the confirming channel."""
        await self._ready(self._queue)

    async def close(self) -> None:
        """Close the channel (every enqueue was confirmed before it returned)."""
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with translated("rabbitmq close"):
                await channel.close()

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None) -> str:
        """Publish one job and wait for its confirm; return its id."""
        (job_id,) = await self.enqueue_many([job], queue=queue, timeout=timeout)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None) -> list[str]:
        """Publish jobs with up to WINDOW confirms outstanding; return their ids in order."""
        queue = queue or self._queue
        messages = [encode_job(job, job_id=new_job_id(), max_attempts=self._max_attempts,
                               limits=self._limits) for job in jobs]
        ids = [str(props.message_id) for _, props in messages]
        wait = self._limits.enqueue_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + wait
        waiting = list(range(len(jobs)))
        async for _ in QUEUE_FULL_BACKOFF.attempts(until=deadline):
            waiting = await self._publish(queue, jobs, messages, waiting)  # those refused
            if not waiting:
                return ids
        taken = set(range(len(jobs))) - set(waiting)
        raise QueueFull(
            f"queue {queue!r} is full: {self._limits.max_pending} jobs ready "
            f"(limits.max_pending), no room for {len(waiting)} more within {wait:g}s",
            accepted=tuple(ids[i] for i in sorted(taken)))

    async def _publish(self, queue: str, jobs: Sequence[NewJob],
                       messages: Sequence[Outgoing],
                       which: list[int]) -> list[int]:
        """Publish ``messages[i] for i in which``; return those a full queue refused.

        On the aiormq channel under aio-pika's (as the consumer does): the aio-pika layer costs
        a Message object per job and adds nothing a publish with confirms needs. A single job
        (``producer --rate`` sends each job when it is due) skips the gather's task.
        """
        raw = await self._ready(queue)
        topology = self.topology(queue)
        refused: list[int] = []
        for start in range(0, len(which), WINDOW):
            sends = []
            for i in which[start:start + WINDOW]:
                tier = topology.tier_for(jobs[i].delay)
                exchange, key = ("", tier) if tier else (self._cfg.exchange, queue)
                body, props = messages[i]
                sends.append(raw.basic_publish(body, exchange=exchange, routing_key=key,
                                               properties=props, mandatory=True))
            results: list[object]
            if len(sends) == 1:
                try:
                    results = [await sends[0]]
                except Exception as exc:
                    results = [exc]
            else:
                results = await asyncio.gather(*sends, return_exceptions=True)
            for i, result in zip(which[start:start + WINDOW], results, strict=True):
                if not isinstance(result, BaseException):
                    continue
                if (self._limits.max_pending and isinstance(result, aiormq.exceptions.DeliveryError)
                        and not isinstance(result, aiormq.exceptions.PublishError)):
                    refused.append(i)  # a negative confirm: the queue is at x-max-length
                else:
                    raise self._explain(result, queue) from result
        return refused

    async def _ready(self, queue: str) -> RawChannel:
        """The channel to publish on, connecting and declaring ``queue`` first if needed."""
        if self._channel is None or self._channel.is_closed or self._raw is None:
            if not self._link.is_open:
                await self._link.open()
            self._channel = await self._link.channel(confirms=True)
            with translated("rabbitmq open channel"):
                self._raw = await self._channel.get_underlay_channel()
        if queue not in self._declared:
            declaring = await self._link.channel(confirms=False)
            with translated("rabbitmq declare"):
                await self.topology(queue).declare(declaring)
                await declaring.close()
            self._declared.add(queue)
        return self._raw

    def _explain(self, exc: BaseException, queue: str) -> TransportError:
        if isinstance(exc, aiormq.exceptions.PublishError):
            return TransportError(f"RabbitMQ returned a message for queue {queue!r}: no queue is "
                                  f"bound for it (run `jobq init --transport=rabbitmq`)")
        if isinstance(exc, aiormq.exceptions.DeliveryError):
            return TransportError(f"RabbitMQ refused a message for queue {queue!r} "
                                  f"(negative confirm): {describe_amqp(exc)}")
        if isinstance(exc, aiormq.exceptions.AMQPError | ConnectionError | OSError | RuntimeError):
            return ConnectionLost(f"rabbitmq publish: {describe_amqp(exc)}")
        if isinstance(exc, TransportError):
            return exc
        raise exc
