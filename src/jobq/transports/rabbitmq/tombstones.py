"""``<q>.cancelled``: the tombstones of cancelled jobs on RabbitMQ (``jobq jobs cancel``).

A message cannot be found in a queue by id without taking it, so ``jobq jobs cancel`` does not
look for the job: it publishes a tombstone (persistent, confirmed, its message_id the job's id)
to ``<q>.cancelled``, where it stays TOMBSTONE_TTL. Every consumer reads that queue: a passive
declare each second (the ready count), and when the count differs from what its last read
found, a read of the whole queue with basic.get, every message put back when the channel
closes (a classic queue keeps them in their places). A job a consumer receives whose id has a
tombstone is acked unrun, as cancelled; one it is running is cancelled by the pool
(``Transport.cancelled``). Readers hold the tombstones unacked for a moment, so another
reader's look may find fewer: a consumer forgets none it read. It reads again at once when it
sees more messages than its last read found (a new tombstone), and when it sees another
count, fewer (another reader's walk, or expired ones), at most every RECHECK seconds: a walk
makes the others see fewer, and re-reading at once would have them walk each other's walks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel

from jobq.core.errors import TransportError, describe
from jobq.transports.rabbitmq.connect import RabbitLink, short_channel
from jobq.transports.rabbitmq.probe import ReadyCount
from jobq.transports.rabbitmq.topology import TOMBSTONE_TTL, Topology

RECHECK = 10.0  # seconds between reads for a count lower than the last read found
POLL = 1.0  # a consumer's seconds between looks at <q>.cancelled (``watch``)


class Tombstones:
    """The ids of one queue's cancelled jobs, as last read from ``<q>.cancelled``."""

    def __init__(self, link: RabbitLink, topology: Topology) -> None:
        self._link = link
        self._topology = topology
        self._count = ReadyCount(link, topology.cancelled, "rabbitmq tombstones")
        self._found = 0  # messages the last read found
        self._read_at = 0.0  # when (monotonic) it was
        self.ids: dict[str, float] = {}  # job id -> when this process first read its tombstone

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.ids

    async def leave(self, channel: AbstractChannel, job_id: str) -> None:
        """Publish a tombstone for ``job_id`` on ``channel`` (a confirming one)."""
        await channel.default_exchange.publish(
            aio_pika.Message(b"", message_id=job_id, timestamp=datetime.now(UTC),
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=self._topology.cancelled, mandatory=True)

    async def watch(self, log: logging.Logger) -> None:
        """Refresh every POLL seconds, until cancelled (a consumer's); a failed look is logged
        once until one succeeds (a lost link: the consumer's supervisor reconnects)."""
        failing = False
        while True:
            await asyncio.sleep(POLL)
            try:
                await self.refresh()
                failing = False
            except TransportError as exc:
                if not failing:
                    log.warning("could not read the tombstones of cancelled jobs (%s); "
                                "trying again each second", describe(exc))
                failing = True

    async def refresh(self) -> None:
        """Look at the ready count; read the tombstones again if it is not what was found."""
        count = await self._count()
        if count > self._found or (count != self._found
                                   and time.monotonic() - self._read_at >= RECHECK):
            await self.read()

    async def read(self) -> set[str]:
        """Read every tombstone (put back after), remember their ids; the ids read."""
        ids: set[str] = set()
        found = 0
        try:  # the channel's close puts every tombstone back
            async with short_channel(self._link, confirms=False,
                                     what="rabbitmq tombstones") as channel:
                queue = await channel.declare_queue(self._topology.cancelled, passive=True)
                while (message := await queue.get(no_ack=False, fail=False)) is not None:
                    found += 1
                    if message.message_id:
                        ids.add(message.message_id)
        except TransportError as exc:
            if not isinstance(exc.__cause__, aiormq.exceptions.ChannelNotFoundEntity):
                raise  # no <q>.cancelled (a topology of an older jobq): no tombstones
        now = time.monotonic()
        self._found, self._read_at = found, now
        for job_id in ids:
            self.ids.setdefault(job_id, now)
        for job_id, seen in list(self.ids.items()):  # expired in the queue by now
            if now - seen > TOMBSTONE_TTL:
                del self.ids[job_id]
        return ids
