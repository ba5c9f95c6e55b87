"""``<q>.paused``: a queue's pause on RabbitMQ, one message in it while paused.

RabbitMQ keeps no key-value state, so the pause is a message: ``jobq pause`` publishes one
(persistent, confirmed; its body the time) to ``<q>.paused``, ``jobq resume`` deletes that
queue and declares it again (a delete drops a message someone holds unacked too; a purge
would leave it to come back). Every consumer looks at the ready count with a passive declare
each second, on a channel kept for it. Reading the time means taking the message (basic.get)
and rejecting it back; for that moment the ready count is 0. So an empty look is believed by
one who saw the queue paused (and by pause and resume) only when a second look, RECHECK
later, agrees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from jobq.core.port import PauseState
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.probe import ReadyCount
from jobq.transports.rabbitmq.topology import Topology

RECHECK = 0.25  # a reader holds the message for one round trip; this is well past it


def paused_at(message: AbstractIncomingMessage) -> datetime | None:
    """The time in a pause message's body; None for one jobq did not write."""
    try:
        value = json.loads(message.body)["paused_at"]
        since = datetime.fromisoformat(value)
    except (ValueError, KeyError, TypeError):
        return None
    return since if since.tzinfo is not None else None


def _ready(flag: AbstractQueue) -> int:
    return int(flag.declaration_result.message_count or 0)


class PauseFlag:
    """Pause, resume and look at ``<q>.paused``."""

    def __init__(self, link: RabbitLink, topology: Topology) -> None:
        self._link = link
        self._topology = topology
        self._count = ReadyCount(link, topology.paused, "rabbitmq pause flag")  # consumers' looks
        self._seen = False  # the last look found it paused

    async def pause(self, channel: AbstractChannel) -> PauseState:
        """Publish the pause message on ``channel`` (confirming) unless one is there."""
        flag = await self._look(channel)
        if _ready(flag):
            return PauseState(paused=True, since=(await self.state(flag)).since)
        now = datetime.now(UTC)
        body = json.dumps({"paused_at": now.isoformat()}).encode()
        await channel.default_exchange.publish(
            aio_pika.Message(body, content_type="application/json", timestamp=now,
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=self._topology.paused, mandatory=True)
        return PauseState(paused=True, since=now, changed=True)

    async def resume(self, channel: AbstractChannel) -> PauseState:
        """Delete and re-declare ``<q>.paused`` if it holds the pause; the time it ended."""
        flag = await self._look(channel)
        if not _ready(flag):
            return PauseState(paused=False)
        message = await flag.get(no_ack=True, fail=False)
        since = None if message is None else paused_at(message)
        await flag.delete(if_unused=False, if_empty=False)
        await self._topology.declare_paused(channel)
        return PauseState(paused=False, since=since, changed=True)

    async def state(self, flag: AbstractQueue) -> PauseState:
        """Paused or not as ``flag``'s declare-ok says; the time read from the message, put back."""
        if not _ready(flag):
            return PauseState(paused=False)
        message = await flag.get(no_ack=False, fail=False)
        if message is None:  # another reader holds it this moment
            return PauseState(paused=True)
        try:
            return PauseState(paused=True, since=paused_at(message))
        finally:
            with contextlib.suppress(Exception):  # gone meanwhile (a resume): nothing to put back
                await message.reject(requeue=True)

    async def paused(self) -> bool:
        """Whether ``<q>.paused`` holds a message; an empty look after a full one is checked."""
        ready = await self._count()
        if not ready and self._seen:
            await asyncio.sleep(RECHECK)
            ready = await self._count()
        self._seen = ready > 0
        return self._seen

    async def _look(self, channel: AbstractChannel) -> AbstractQueue:
        flag = await self._topology.declare_paused(channel)
        if not _ready(flag):
            await asyncio.sleep(RECHECK)
            flag = await self._topology.declare_paused(channel)
        return flag

