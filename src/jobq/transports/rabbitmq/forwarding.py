"""The consumer's copies of the messages it received: a retry to its tier, a dead letter to
``<q>.dlx``, a release back home, an early message on to its next tier, a crash redelivery to
``<q>.alone``. Each copy is published (copies.py: confirmed, with a deadline) and only then is
its original acked, on the original's own channel: at least once.

A copy that fails hands the original back (nack with requeue: the broker counts a delivery) or,
when the channel is gone, ends the session (the broker redelivers it with the session's other
deliveries). While the broker blocks publishing (a resource alarm) a copy is held, its original
unacked, and sent once unblocked (see ``_hold``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from jobq.core.errors import ConnectionLost, TransportError, describe
from jobq.core.job import Delivery, Spent
from jobq.transports.rabbitmq.alone import AloneQueue
from jobq.transports.rabbitmq.codec import ATTEMPT, ISOLATE, REDELIVERED, SUSPECT, republish
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.copies import Copier, CopyNacked, CopyTimeout
from jobq.transports.rabbitmq.crashes import CrashCopy
from jobq.transports.rabbitmq.session import Handle, Session
from jobq.transports.rabbitmq.state import Background, State


class Forwarder:
    """Publishes one consumer's copies on its session's confirming channel, then acks each
    original; holds them while the broker blocks publishing."""

    def __init__(self, copier: Copier, publish_link: RabbitLink, alone: AloneQueue, *,
                 queue: str, state: State, tasks: Background, log: logging.Logger) -> None:
        self._copier = copier
        self._link = publish_link  # the copies' connection (see copies.py)
        self._alone = alone
        self._queue = queue
        self._state = state
        self._tasks = tasks
        self._log = log
        self.held: set[Handle] = set()  # originals whose copy waits for unblocked (_hold)
        self.held_back = 0  # held originals left unacked at a close or loss (come back)
        self.copying: set[asyncio.Task[None]] = set()  # crash redeliveries being copied forward

    @property
    def blocked(self) -> bool:
        """True while the broker blocks the copies' connection (a resource alarm)."""
        return self._link.blocked

    async def forward(self, delivery: Delivery, exchange: str, routing_key: str,
                      headers: dict[str, Any], drop: tuple[str, ...] = (), *,
                      patient: bool = True) -> None:
        """Publish a copy of ``delivery`` (``headers`` set, ``drop`` removed), then ack it.

        ``patient``: held while the broker blocks publishing, rather than failed at once.
        """
        handle: Handle = delivery.handle
        session = handle.session
        if not session.alive:
            self._state.stale += 1
            return
        raw = handle.message
        job = delivery.job
        body, props = republish(raw.body, raw.header.properties, headers, drop, (job.id, job.kind))
        copier = self._copier
        if patient and self._link.blocked and not self._state.closing:
            self._hold(handle, body, props, exchange, routing_key)
            return
        try:
            if not patient and copier.failing:
                copier.refuse(routing_key)
            await copier.send(session.sender, body, props, exchange=exchange,
                              routing_key=routing_key)
        except ConnectionLost as exc:
            # The channel or connection is gone, whether or not its close callback has run
            # yet: end the session now so the supervisor reconnects (the broker redelivers
            # the original with the rest of the session's deliveries).
            session.end(f"publish failed: {describe(exc)}")
            raise
        except CopyNacked as exc:
            # Refused for the whole deadline: new channels (the supervisor reconnects), and the
            # original comes back with the session's other deliveries.
            session.end(f"copies refused: {describe(exc)}")
            raise
        except CopyTimeout:
            if patient and self._link.blocked and not self._state.closing and session.alive:
                # The alarm came while it waited: hold it too (sent again once unblocked; the
                # first may still arrive, a duplicate).
                self._hold(handle, body, props, exchange, routing_key)
                return
            await session.requeue(handle.tag)
            raise
        except TransportError:
            # Not forwarded: give the original back now rather than pinning a prefetch slot;
            # the broker counts that delivery, as it would after a crash.
            await session.requeue(handle.tag)
            raise
        self._forwarded(handle)

    async def give_back(self, delivery: Delivery) -> None:
        """Publish ``delivery`` back where it came from, attempt uncounted, then ack it.

        A release does not wait for a broker that takes no publishes: one release waiting out
        rabbitmq.publish_timeout is enough to know (shutdown releases them one by one). One
        whose attempts are spent goes back charged, so that it is found spent again (a copy is
        not redelivered: a crash's mark would not be seen on it).
        """
        home = self._alone.name if delivery.isolate else self._queue
        attempt = delivery.job.attempt + (1 if isinstance(delivery.fact, Spent) else 0)
        await self.forward(delivery, "", home, {ATTEMPT: attempt}, patient=False)

    async def give_back_quietly(self, delivery: Delivery) -> None:
        """``give_back``; one that fails comes back by itself (requeued, or redelivered)."""
        with contextlib.suppress(TransportError):
            await self.give_back(delivery)

    def copy_later(self, delivery: Delivery, copy: CrashCopy) -> None:
        """``copy_forward`` in the background; a run alone waits for it first (``copying``)."""
        copying = self._tasks.spawn(self.copy_forward(delivery, copy))
        self.copying.add(copying)
        copying.add_done_callback(self.copying.discard)

    async def copy_forward(self, delivery: Delivery, copy: CrashCopy) -> None:
        """A crash redelivery: its copy to ``<q>.alone`` (a classic queue's first one: back to
        the work queue, marked suspect; see crashes.py)."""
        job = delivery.job
        try:
            if copy.suspect:
                self._log.debug("job %s came back redelivered; it runs again, alone if it comes "
                                "back once more", job.id)
                await self.forward(delivery, "", self._queue,
                                   {ATTEMPT: copy.attempt, SUSPECT: 1, REDELIVERED: 1})
                return
            charged = copy.attempt > job.attempt
            self._log.info("job %s was in flight when a consumer died or lost its channel; "
                           "it runs again alone (attempt %d of %d%s)", job.id, copy.attempt,
                           job.max_attempts, ", that crash counted" if charged else "")
            await self.forward(delivery, "", self._alone.name,
                               {ATTEMPT: copy.attempt, ISOLATE: 1, REDELIVERED: 1},
                               drop=(SUSPECT,))
            self._alone.due = True
        except TransportError as exc:
            self._log.error("could not copy job %s forward (%s)", job.id, describe(exc))

    def _forwarded(self, handle: Handle) -> None:
        if handle.session.alive:
            handle.session.complete(handle.tag)
        else:
            self._state.stale += 1  # forwarded, but the original's ack is lost: it comes back too

    def _hold(self, handle: Handle, body: bytes, props: Any, exchange: str,
              routing_key: str) -> None:
        """Keep the original unacked and send its copy once the broker unblocks publishing.

        Not nacked back: that counts a delivery on quorum queues and the original would come
        straight back as a crash redelivery, whose own copy is blocked too; every
        publish_timeout another count, until the queue's delivery limit dead-letters a job that
        never failed (and a marked one is charged a crash each time). Held originals pin their
        prefetch slots, so while blocked at most the prefetch is held and the broker sends
        nothing more once they fill it. At shutdown or a lost session they stay unacked: the
        channel's close gives them back (one delivery counted).
        """
        if handle in self.held:
            return
        self.held.add(handle)
        self._tasks.spawn(self._send_when_unblocked(handle, body, props, exchange, routing_key))

    async def _send_when_unblocked(self, handle: Handle, body: bytes, props: Any,
                                   exchange: str, routing_key: str) -> None:
        session, link = handle.session, self._link
        try:
            while True:
                await self._until_unblocked(session)
                if self._state.closing or not session.alive:
                    self.held_back += 1  # left unacked: given back by the channel's close or loss
                    return
                try:
                    await self._copier.send(session.sender, body, props, exchange=exchange,
                                            routing_key=routing_key)
                except ConnectionLost as exc:
                    session.end(f"publish failed: {describe(exc)}")
                    return
                except CopyTimeout:
                    if link.blocked:
                        continue  # blocked again: hold on
                    await self._give_up(handle, routing_key)
                    return
                except TransportError:
                    await self._give_up(handle, routing_key)
                    return
                self._forwarded(handle)
                return
        finally:
            self.held.discard(handle)

    async def _give_up(self, handle: Handle, routing_key: str) -> None:
        self._log.error("could not publish a held copy to %s; the original goes back to the "
                        "queue", routing_key)
        await handle.session.requeue(handle.tag)

    async def _until_unblocked(self, session: Session) -> None:
        """Until publishing is unblocked, the session ends or close() begins."""
        link = self._link
        if not link.blocked:
            return
        waits = [asyncio.ensure_future(event.wait())
                 for event in (link.unblocked, session.lost, self._state.closed)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
