"""A queue's ready count, asked each second by every consumer on a channel kept for it."""

from __future__ import annotations

import aiormq
from aio_pika.abc import AbstractChannel

from jobq.core.errors import TransportError
from jobq.transports.rabbitmq.connect import RabbitLink, translated
from jobq.transports.rabbitmq.topology import node_down


class ReadyCount:
    """Passive declares of one queue (the pause flag, the tombstones) on one kept channel."""

    def __init__(self, link: RabbitLink, queue: str, what: str) -> None:
        self._link = link
        self._queue = queue
        self._what = what  # names the look in errors: "rabbitmq pause flag"
        self._channel: AbstractChannel | None = None

    async def __call__(self) -> int:
        """Ready messages in the queue; 0 if it does not exist (a topology of an older jobq, or
        a moment between a delete and a declare)."""
        channel = self._channel
        if channel is None or channel.is_closed:
            channel = self._channel = await self._link.channel(confirms=False)
        try:
            with translated(self._what):
                queue = await channel.declare_queue(self._queue, passive=True)
        except TransportError as exc:
            cause = exc.__cause__
            if isinstance(cause, aiormq.exceptions.ChannelNotFoundEntity) and not node_down(cause):
                return 0  # the broker closed the channel: the next look opens another
            raise  # unknown (a cluster node down holds the queue): the caller keeps its last look
        return int(queue.declaration_result.message_count or 0)
