"""Schedules on RabbitMQ: one leader fires the ticks, its record of them kept in a queue.

RabbitMQ has no transaction across queues, so the record cannot commit with the enqueue as on
Postgres. Instead one process at a time fires the schedules of a config's queue ``<q>``: the
one whose connection holds the exclusive queue ``<q>.scheduler`` (the broker lets one
connection declare it and deletes it when that connection closes, so a dead leader's lock goes
with it). The leader reads the last tick of each schedule from ``<q>.schedules``
(durable; one message per schedule and tick, the latest wins) when it takes the lock, and for
each tick: enqueues the job (confirmed), records the tick (confirmed), then acks the records
it superseded.

So a tick enqueues once while its leader lives: a record that fails after its job's confirm is
kept and sent again first thing at the next look. A leader killed between the job's confirm
and the record's (one round trip) leaves that tick unrecorded, and the next leader enqueues it
again: at most one duplicate per such crash, the same ``schedule`` and ``tick`` headers on both.
The ticks run on a connection of their own (``rmq_link(role="schedules")``), so a broker that
blocks publishing, or a cut-off call, never touches the consumer's deliveries and acks; at
close the lock queue is deleted, so the next leader takes over at once.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractQueue

from jobq.config import RabbitConfig
from jobq.core.errors import TransportError
from jobq.core.within import Deadline
from jobq.feeds.schedules import Fired, Schedule
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
        self._unrecorded: dict[str, datetime] = {}  # ticks enqueued whose record failed

    @property
    def record_queue(self) -> str:
        """The queue of fired ticks."""
        return f"{self._queue}.schedules"

    @property
    def lock_queue(self) -> str:
        """The exclusive queue whose holder fires."""
        return f"{self._queue}.scheduler"

    async def open(self) -> None:
        """Declare the publisher's topology (the lead is taken at the first tick)."""
        await self._publisher.open()

    async def fire(self, schedule: Schedule, tick: datetime) -> Fired:
        """Enqueue the tick's job unless it was fired, if this process leads (schedules.Ticks)."""
        if not await self._lead():
            return Fired.BUSY
        for key, pending in list(self._unrecorded.items()):
            await self._record(key, pending)
            del self._unrecorded[key]
        key = f"{schedule.queue or self._queue}/{schedule.name}"
        last = self._last.get(key)
        if last is not None and last >= tick:
            return Fired.BEFORE
        if last is not None:
            await self._publisher.enqueue(schedule.job(tick), queue=schedule.queue or self._queue)
        self._last[key] = tick  # enqueued: never again, whatever happens to the record
        self._unrecorded[key] = tick
        await self._record(key, tick)
        del self._unrecorded[key]
        await self._compact()
        return Fired.BEFORE if last is None else Fired.NOW

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        """The last tick each schedule fired, as the record queue holds it (``jobq schedules``).

        It reads the records (unacked, put back when its channel closes): a leader taking over
        in that moment would see none and start each schedule at its next tick.
        """
        async with Deadline(self._timeout):
            channel = await self._link.channel(confirms=False)
            try:
                with translated("rabbitmq schedules"):
                    records = await self._declare(channel)
                    latest, _ = await self._read(records)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()  # what was read, unacked, goes back
        prefix = f"{queue or self._queue}/"
        return {k.removeprefix(prefix): v for k, v in latest.items() if k.startswith(prefix)}

    async def close(self) -> None:
        """Give up the lead at once: delete the lock queue, close the channels (bounded)."""
        lock, records = self._lock, self._records
        self._lock = self._records = None
        if lock is not None and not lock.is_closed:
            with contextlib.suppress(Exception):
                async with Deadline(self._timeout):
                    await lock.queue_delete(self.lock_queue)
        await _close(records, lock, timeout=self._timeout)

    async def _lead(self) -> bool:
        """True while this process holds ``<q>.scheduler``; takes it if it is free.

        The lead counts only once the records are read and rewritten: a take that fails half
        way lets go of everything, and the next look starts again.
        """
        if (self._lock is not None and not self._lock.is_closed and self._records is not None
                and not self._records.is_closed):
            return True
        await self.close()
        lock = records = None
        try:
            async with Deadline(self._timeout):
                lock = await self._link.channel(confirms=False)
                try:
                    with translated("rabbitmq scheduler lock"):
                        await lock.declare_queue(self.lock_queue, exclusive=True)
                except TransportError as exc:
                    if isinstance(exc.__cause__, aiormq.exceptions.ChannelLockedResource):
                        return False  # another process leads
                    raise
                records = await self._link.channel(confirms=True)
                with translated("rabbitmq schedules"):
                    queue = await self._declare(records)
                    last, messages = await self._read(queue)
                    for key, tick in last.items():  # one record per schedule from here on
                        await _publish_record(records, self.record_queue, key, tick)
                    for message in messages:
                        await message.ack()
        except BaseException:
            await _close(records, lock, timeout=self._timeout)
            raise
        self._lock, self._records, self._last = lock, records, last
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
            entry = _entry(message.body)
            if entry is not None:
                key, tick = entry
                if key not in latest or tick > latest[key]:
                    latest[key] = tick
        return latest, messages

    async def _record(self, key: str, tick: datetime) -> None:
        assert self._records is not None
        async with Deadline(self._timeout):
            with translated("rabbitmq schedule record"):
                await _publish_record(self._records, self.record_queue, key, tick)

    async def _compact(self) -> None:
        """Ack the records a later tick superseded; put the others back."""
        assert self._records is not None
        async with Deadline(self._timeout):
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
        entry = _entry(body)
        if entry is None:
            return True
        last = self._last.get(entry[0])
        return last is not None and entry[1] < last


def _entry(body: bytes) -> tuple[str, datetime] | None:
    """A record's schedule key and tick; None for anything else (dropped at the next compaction)."""
    try:
        entry = json.loads(body)
        tick = datetime.fromisoformat(entry["tick"])
        key = str(entry["key"])
    except (ValueError, KeyError, TypeError):
        return None
    return (key, tick) if tick.tzinfo is not None else None


async def _publish_record(channel: AbstractChannel, queue: str, key: str, tick: datetime) -> None:
    body = json.dumps({"key": key, "tick": tick.isoformat()}).encode()
    await channel.default_exchange.publish(
        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue)


async def _close(*channels: AbstractChannel | None, timeout: float) -> None:
    for channel in channels:
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):  # a dark link answers no close: bounded
                async with Deadline(timeout):
                    await channel.close()
