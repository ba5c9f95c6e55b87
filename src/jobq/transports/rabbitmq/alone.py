"""``<q>.alone``: crash copies (suspects), taken one at a time with basic.get, each run beside
the consumer's other work.

A crash redelivery is never run: its copy goes to ``<q>.alone`` (see rmq crashes). No consumer
subscribes to that queue, so no copy ever waits in a consumer's prefetch buffer. A consumer
looks at its depth every POLL seconds (and right after it made a copy); while it holds
messages, the consumer takes the copies one by one, the next once the one before it settled
and its ack went out, and hands each out beside its other work, which goes on. A message
taken from ``<q>.alone`` is therefore its consumer's one suspect (or microseconds from it)
for as long as it is unacked: if it comes back redelivered, the crash is charged to it, an
attempt counted (docs/architecture.md, "Crashes": a suspect is charged for a crash a job
beside it caused only if that job was never suspected, once at most per such job).

Before: marked copies went back to the work queue and waited in prefetch buffers like any
message; a connection cut every few seconds (the fault suite) redelivered the held ones and
charged them a crash they never had, until innocent jobs died.
"""

from __future__ import annotations

from typing import Any

from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic

from jobq.core.looks import uncut
from jobq.transports.rabbitmq.connect import translated

POLL = 1.0  # how often a consumer looks at <q>.alone's depth while it believes it empty


class AloneQueue:
    """What one consumer knows of ``<q>.alone``, and the two calls it makes on it."""

    __slots__ = ("_timeout", "due", "name", "out")

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.due = False  # it holds messages, as far as this consumer knows
        self.out: Any = None  # the Handle of the copy handed out and not yet settled
        self._timeout = timeout  # rabbitmq.publish_timeout: a deadline for each call

    async def count(self, channel: Any) -> int:
        """Ready messages in the queue (passive declare on ``channel``, an aio-pika channel).

        Never cut by the caller's cancel (the watcher's, at close): cut in the middle, the
        declare closes ``channel``, the consuming one, and with it the acks not yet sent."""
        with translated("rabbitmq alone queue depth"):
            queue = await uncut(channel.declare_queue(self.name, passive=True,
                                                      timeout=self._timeout))
        return int(queue.declaration_result.message_count or 0)

    async def take(self, raw: Any) -> DeliveredMessage | None:
        """The next message, unacked (basic.get on ``raw``, an aiormq channel); None when empty.

        Empty clears ``due``: the consumer goes back to its work queue.
        """
        with translated("rabbitmq basic.get from the alone queue"):
            message: DeliveredMessage = await raw.basic_get(self.name, no_ack=False,
                                                            timeout=self._timeout)
        if isinstance(message.delivery, Basic.GetEmpty):
            self.due = False
            return None
        return message
