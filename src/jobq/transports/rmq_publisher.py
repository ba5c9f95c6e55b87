"""Enqueue jobs into RabbitMQ: persistent messages, publisher confirms, pipelined, returns raised.

Confirms are pipelined: a window of publishes is in flight at once and the broker confirms
them as it goes, instead of one round trip per message. ``mandatory`` is set, so a message no
queue would take comes back as an error instead of vanishing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange

from jobq.config import RabbitConfig
from jobq.errors import ConnectionLost, TransportError
from jobq.transport import NewJob
from jobq.transports.rmq_codec import encode, new_job_id
from jobq.transports.rmq_connect import RabbitLink, describe_amqp, translated
from jobq.transports.rmq_topology import Topology

WINDOW = 2000  # publishes awaiting their confirm at once


class RabbitPublisher:
    """Publisher for the RabbitMQ backend; declares each queue's topology on first use."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str,
                 max_attempts: int, logger: logging.Logger | None = None) -> None:
        self._link = link
        self._cfg = settings
        self._queue = queue
        self._max_attempts = max_attempts
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._declared: set[str] = set()

    def topology(self, queue: str) -> Topology:
        """The topology ``queue`` is published into."""
        return Topology.configured(self._cfg, queue)

    async def open(self) -> None:
        """Declare the default queue's topology and open the confirming channel."""
        await self._ready(self._queue)

    async def close(self) -> None:
        """Close the channel (every enqueue was confirmed before it returned)."""
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with translated("rabbitmq close"):
                await channel.close()

    async def enqueue(self, job: NewJob, *, queue: str | None = None) -> str:
        """Publish one job and wait for its confirm; return its id."""
        (job_id,) = await self.enqueue_many([job], queue=queue)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None) -> list[str]:
        """Publish jobs with up to WINDOW confirms outstanding; return their ids in order."""
        queue = queue or self._queue
        exchange = await self._ready(queue)
        topology = self.topology(queue)
        ids = [new_job_id() for _ in jobs]
        messages = [encode(job, job_id=job_id, max_attempts=self._max_attempts)
                    for job, job_id in zip(jobs, ids, strict=True)]
        assert self._channel is not None
        default = self._channel.default_exchange
        for start in range(0, len(jobs), WINDOW):
            sends = []
            for job, message in zip(jobs[start:start + WINDOW], messages[start:start + WINDOW],
                                    strict=True):
                tier = topology.tier_for(job.delay)
                target, key = (default, tier) if tier else (exchange, queue)
                sends.append(target.publish(message, routing_key=key, mandatory=True))
            results = await asyncio.gather(*sends, return_exceptions=True)
            failure = next((r for r in results if isinstance(r, BaseException)), None)
            if failure is not None:
                raise self._explain(failure, queue) from failure
        return ids

    async def _ready(self, queue: str) -> AbstractExchange:
        """The exchange to publish on, connecting and declaring ``queue`` first if needed."""
        if self._channel is None or self._channel.is_closed:
            if not self._link.is_open:
                await self._link.open()
            self._channel = await self._link.channel(confirms=True)
            self._exchange = None
        if queue not in self._declared:
            declaring = await self._link.channel(confirms=False)
            with translated("rabbitmq declare"):
                await self.topology(queue).declare(declaring)
                await declaring.close()
            self._declared.add(queue)
        if self._exchange is None:
            self._exchange = await self._channel.get_exchange(self._cfg.exchange, ensure=False)
        return self._exchange

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
