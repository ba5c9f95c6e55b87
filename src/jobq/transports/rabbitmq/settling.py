"""The pool's decision for a delivery, carried out on RabbitMQ (``common.carry_out`` calls these).

- ack: batched per channel (acks.py, session.py), on the delivery's own channel;
- retry: a copy, due time in its headers, to the tier its delay hops through first (a delay
  shorter than every tier: to the work queue, held by whoever takes it until due), then the
  original is acked;
- dead-letter: a copy with the reason in its headers to ``<q>.dlx`` -> ``<q>.dead``, then ack;
- cancelled: an ack (the job is gone; its tombstone stays until it expires);
- release: a copy with the attempt header unchanged back to the work queue (``<q>.alone`` for
  one taken from there, mark kept), then ack. Not a nack with requeue: quorum queues count that
  as a delivery (``x-delivery-count``), classic ones set ``redelivered``, and either reads as a
  crash. The price: the released job goes to the back of the queue.

Every copy goes through forwarding.py (confirmed before the original's ack).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from jobq.core.attempts import HEADER as ERRORS
from jobq.core.attempts import AttemptError, appended
from jobq.core.job import Delivery
from jobq.transports.rabbitmq.alone import AloneQueue
from jobq.transports.rabbitmq.codec import ATTEMPT, DUE, MARKS, due_ms
from jobq.transports.rabbitmq.forwarding import Forwarder
from jobq.transports.rabbitmq.session import Handle
from jobq.transports.rabbitmq.state import Inbox, State
from jobq.transports.rabbitmq.topology import Topology


class Settler:
    """Carries out each of the five decisions for one consumer (``common.Settles``)."""

    def __init__(self, forwarder: Forwarder, topology: Topology, alone: AloneQueue, *,
                 inbox: Inbox, state: State) -> None:
        self._forwarder = forwarder
        self._topology = topology
        self._alone = alone
        self._inbox = inbox
        self._state = state

    async def _ack(self, delivery: Delivery) -> None:
        """Ack with the next batch, on the delivery's own channel."""
        self._done(delivery)
        handle: Handle = delivery.handle
        if handle.session.alive:
            handle.session.complete(handle.tag)
        else:
            self._state.stale += 1
            self._state.acks_not_written += 1

    async def _retry(self, delivery: Delivery, delay: float, reason: str,
                     error: AttemptError | None) -> None:
        """Publish to the tier for ``delay`` (confirmed), then ack the original.

        The crash marks are dropped: the job failed cleanly, it did not crash.
        """
        job = delivery.job
        try:  # whatever fails here, the delivery is no longer out (_done)
            headers: dict[str, Any] = {ATTEMPT: job.attempt + 1,
                                       "x-jobq-max-attempts": job.max_attempts,
                                       "x-jobq-last-error": reason}
            _keep(headers, delivery, error)
            tier = None
            if delay > 0:
                headers[DUE] = due_ms(time.time() + delay)
                tier = self._topology.hop(delay)
            await self._forwarder.forward(delivery, "", tier or self._topology.queue, headers,
                                          drop=MARKS if delay > 0 else (*MARKS, DUE))
        finally:
            self._done(delivery)

    async def _dead(self, delivery: Delivery, reason: str, error: AttemptError | None) -> None:
        """Publish to ``<q>.dlx`` with the reason in the headers (confirmed), then ack."""
        job = delivery.job
        try:  # whatever fails here, the delivery is no longer out (_done)
            headers: dict[str, Any] = {
                ATTEMPT: job.attempt, "x-jobq-attempts": job.attempt,
                "x-jobq-max-attempts": job.max_attempts, "x-jobq-error": reason,
                "x-jobq-dead-at": datetime.now(UTC).isoformat(timespec="milliseconds")}
            _keep(headers, delivery, error)
            await self._forwarder.forward(delivery, self._topology.dlx, self._topology.queue,
                                          headers, drop=(*MARKS, DUE))
        finally:
            self._done(delivery)

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Ack: the job is gone from the queue (its tombstone stays until it expires)."""
        await self._ack(delivery)

    async def _release(self, delivery: Delivery) -> None:
        """Publish back to the work queue with the attempt uncounted (confirmed), then ack.

        One taken from ``<q>.alone`` goes back there, mark and attempt kept.
        """
        try:
            await self._forwarder.give_back(delivery)
        finally:
            self._done(delivery)

    def _done(self, delivery: Delivery) -> None:
        """``delivery``, handed out, is being settled; the suspect's: the next may be taken."""
        self._inbox.out -= 1
        alone = self._alone
        if alone.out is not None and delivery.handle is alone.out:
            alone.out = None
            if alone.due:
                self._inbox.wake()


def _keep(headers: dict[str, Any], delivery: Delivery, error: AttemptError | None) -> None:
    """The attempt's error added to the history the message carries (attempts.py), if it
    raised one; else the history travels on as it came."""
    if error is not None:
        came = delivery.handle.message.header.properties.headers
        headers[ERRORS] = appended(came.get(ERRORS) if isinstance(came, Mapping) else None, error)
