"""Schedules on RabbitMQ: one leader fires the ticks, its record of them kept in a queue.

RabbitMQ has no transaction across queues, so the record cannot commit with the enqueue as on
Postgres. Instead one process at a time fires the schedules of a config's queue ``<q>``: the
one whose connection holds the exclusive queue ``<q>.scheduler`` (the broker lets one
connection declare it and deletes it when that connection closes, so a dead leader's lock goes
with it). The leader reads the last tick of each schedule from ``<q>.schedules``
(durable; one message per schedule and tick, the latest wins) when it takes the lock, and for
each tick: enqueues the job (confirmed), records the tick (confirmed), then acks the records
it superseded.

So a tick enqueues once while its leader lives. A leader killed between the job's confirm and
the record's (one round trip) leaves that tick unrecorded, and the next leader enqueues it
again: at most one duplicate per such crash, the same ``schedule`` and ``tick`` headers on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractQueue

from jobq.config import RabbitConfig
from jobq.errors import TransportError
from jobq.schedules import Schedule
from jobq.transports.rabbitmq.connect import RabbitLink, translated
from jobq.transports.rabbitmq.publisher import RabbitPublisher


class RabbitTicks:
    """The fired ticks of a config's schedules, fired by the holder of ``<q>.scheduler``."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, publisher: RabbitPublisher, *,
                 queue: str) -> None:
        self._link = link
        self._timeout = settings.publish_timeout
        self._publisher = publisher
        self._queue = queue
        self._lock: AbstractChannel | None = None
        self._records: AbstractChannel | None = None
        self._last: dict[str, datetime] = {}

    @property
    def record_queue(self) -> str:
        """The queue of fired ticks."""
        return f"{self._queue}.schedules"

    async def fire(self, schedule: Schedule, tick: datetime) -> bool:
        """Enqueue the tick's job unless it was fired, if this process leads (schedules.Ticks)."""
        if not await self._lead():
            return False
        key = f"{schedule.queue or self._queue}/{schedule.name}"
        last = self._last.get(key)
        if last is not None and last >= tick:
            return False
        if last is not None:
            await self._publisher.enqueue(schedule.job(tick), queue=schedule.queue or self._queue)
        await self._record(key, tick)
        self._last[key] = tick
        await self._compact()
        return last is not None

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        """The last tick each schedule fired, as the record queue holds it (``jobq schedules``)."""
        async with asyncio.timeout(self._timeout):
            channel = await self._link.channel(confirms=False)
            try:
                with translated("rabbitmq schedules"):
                    records = await self._declare(channel)
                    latest, _ = await self._read(records)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()  # what was read, unacked, goes back (in the timeout)
        prefix = f"{queue or self._queue}/"
        return {k.removeprefix(prefix): v for k, v in latest.items() if k.startswith(prefix)}

    async def close(self) -> None:
        """Give up the lead (the exclusive queue goes with its channel's connection)."""
        for channel in (self._records, self._lock):
            if channel is not None and not channel.is_closed:
                with contextlib.suppress(Exception):  # a dark link answers no close: bounded
                    async with asyncio.timeout(self._timeout):
                        await channel.close()
        self._lock = self._records = None

    async def _lead(self) -> bool:
        """True while this process holds ``<q>.scheduler``; takes it if it is free."""
        if (self._lock is not None and not self._lock.is_closed and self._records is not None
                and not self._records.is_closed):
            return True
        await self.close()
        async with asyncio.timeout(self._timeout):
            lock = await self._link.channel(confirms=False)
            try:
                with translated("rabbitmq scheduler lock"):
                    await lock.declare_queue(f"{self._queue}.scheduler", exclusive=True)
            except TransportError as exc:
                if isinstance(exc.__cause__, aiormq.exceptions.ChannelLockedResource):
                    return False  # another process leads
                raise
            self._lock = lock
            self._records = await self._link.channel(confirms=True)
            with translated("rabbitmq schedules"):
                records = await self._declare(self._records)
                self._last, messages = await self._read(records)
                for key, tick in self._last.items():  # one record per schedule from here on
                    await self._record(key, tick)
                for message in messages:
                    await message.ack()
        return True

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        return await channel.declare_queue(self.record_queue, durable=True,
                                           arguments={"x-queue-type": "classic"})

    async def _read(self, records: AbstractQueue
                    ) -> tuple[dict[str, datetime], list[aio_pika.abc.AbstractIncomingMessage]]:
        """Every record (taken, unacked) and the latest tick of each schedule in them."""
        latest: dict[str, datetime] = {}
        messages = []
        while (message := await records.get(no_ack=False, fail=False)) is not None:
            messages.append(message)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(message.body)
                key, tick = str(entry["key"]), datetime.fromisoformat(entry["tick"])
                if key not in latest or tick > latest[key]:
                    latest[key] = tick
        return latest, messages

    async def _record(self, key: str, tick: datetime) -> None:
        assert self._records is not None
        body = json.dumps({"key": key, "tick": tick.isoformat()}).encode()
        async with asyncio.timeout(self._timeout):
            with translated("rabbitmq schedule record"):
                await self._records.default_exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=self.record_queue)

    async def _compact(self) -> None:
        """Ack the records a later tick superseded; put the others back."""
        assert self._records is not None
        async with asyncio.timeout(self._timeout):
            with translated("rabbitmq schedules"):
                records = await self._declare(self._records)
                _, messages = await self._read(records)
                for message in messages:
                    if self._superseded(message.body):
                        await message.ack()
                    else:
                        await message.nack(requeue=True)

    def _superseded(self, body: bytes) -> bool:
        """True for a record of a tick older than its schedule's last (or not a record at all)."""
        try:
            entry = json.loads(body)
            tick = datetime.fromisoformat(entry["tick"])
            last = self._last.get(str(entry["key"]))
        except (ValueError, KeyError, TypeError):
            return True
        return last is not None and tick < last
