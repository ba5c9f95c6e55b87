"""The consumer's copies (retry, dead-letter, release, crash copies): one confirmed publish each,
with a deadline.

They go on a connection of their own (RabbitMQ's advice for resource alarms): a broker that
blocks publishing blocks that connection only, never the consuming one and its acks. A copy
not confirmed within ``rabbitmq.publish_timeout`` fails as a ``CopyTimeout`` (the caller hands
the original back: at least once; the copy may still arrive, a duplicate).
"""

from __future__ import annotations

import asyncio

from aiormq.abc import AbstractChannel as RawChannel
from pamqp.commands import Basic

from jobq.core.errors import TransportError
from jobq.core.within import Deadline
from jobq.transports.rabbitmq.connect import RabbitLink, nacked, translated

NACK_PAUSE = 0.05  # seconds before a nacked copy is sent again, doubling up to NACK_PAUSE_MAX
NACK_PAUSE_MAX = 1.0


class CopyTimeout(TransportError):
    """A copy the broker did not confirm in time (blocked by an alarm, or a dark link)."""


class CopyNacked(CopyTimeout):
    """A copy the broker went on refusing (negative confirms) for the whole deadline: a channel
    that saw a quorum leader die may refuse until replaced, so the session ends with it."""


class Copier:
    """Publishes copies on a session's confirming channel; remembers when publishing is stuck."""

    def __init__(self, link: RabbitLink, timeout: float, *, bounded: str = "") -> None:
        self._link = link
        self._timeout = timeout
        # The work queue when limits.max_pending bounds it: a nack from it means full, final.
        self._bounded = bounded
        self.stuck = False  # the last copy timed out (and none was confirmed since)

    @property
    def failing(self) -> bool:
        """True while a copy would likely wait its whole deadline (blocked, or stuck)."""
        return self._link.blocked or self.stuck

    async def send(self, sender: RawChannel, body: bytes, props: Basic.Properties, *,
                   exchange: str, routing_key: str) -> None:
        """Publish one copy (mandatory, confirmed) within the deadline."""
        what = f"rabbitmq publish to {routing_key}"
        nacks = 0
        try:
            async with Deadline(self._timeout):
                while True:
                    try:
                        with translated(what):
                            await sender.basic_publish(body, exchange=exchange,
                                                       routing_key=routing_key,
                                                       properties=props, mandatory=True)
                        break
                    except TransportError as exc:
                        if not nacked(exc.__cause__) or routing_key == self._bounded:
                            raise  # (a full bounded work queue: handed back at once, as ever)
                    # A negative confirm: the queue could not take the copy (a quorum queue
                    # between leaders after a cluster node died). Sent again after a pause,
                    # the original kept meanwhile: handing it back would bring it straight
                    # back, counted against the delivery limit each time (faults/cluster).
                    nacks += 1
                    await asyncio.sleep(min(NACK_PAUSE * 2 ** (nacks - 1), NACK_PAUSE_MAX))
        except TimeoutError:
            if nacks:  # refused, not unanswered: the channel is what may be stuck
                raise CopyNacked(f"{what}: refused ({nacks} negative confirms) for "
                                 f"{self._timeout:g}s (rabbitmq.publish_timeout)") from None
            self.stuck = True
            why = ("the broker blocks publishing (a resource alarm)" if self._link.blocked
                   else "no confirm")
            raise CopyTimeout(f"{what}: not confirmed within {self._timeout:g}s "
                              f"(rabbitmq.publish_timeout): {why}") from None
        self.stuck = False

    def refuse(self, routing_key: str) -> None:
        """Fail at once a copy that would wait for its deadline (see ``failing``)."""
        why = ("the broker blocks publishing (a resource alarm)" if self._link.blocked
               else "the last copy was not confirmed in time")
        raise CopyTimeout(f"rabbitmq publish to {routing_key}: not sent, {why}")
