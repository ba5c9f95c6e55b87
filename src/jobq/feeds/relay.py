"""``jobq relay``: a PostgreSQL queue's jobs published to RabbitMQ, at least once, in order.

A team on RabbitMQ enqueues on PostgreSQL inside its own transaction (``connection=``, the
transactional enqueue) and runs a relay: the job exists if and only if that transaction
committed, and reaches RabbitMQ afterwards, confirmed, under its PostgreSQL id. The backend
side is an ``Outbox`` (transports/postgres/outbox.py); the publish is the RabbitMQ
publisher's. Several relays may run at once: one takes a queue's batch at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jobq.core.backoff import Backoff
from jobq.core.errors import QueueFull, TransportError, describe
from jobq.core.port import NewJob
from jobq.core.within import within

# Publishes the jobs (ids, jobs) and returns the ids it refused, each with the reason: a job
# the broker can never take (MalformedJob: the outbox dead-letters it instead of retrying it).
Send = Callable[[Sequence[str], Sequence[NewJob]], Awaitable[Mapping[str, str]]]
Publish = Send  # the RabbitMQ publisher's publish_valid
IDLE_WAIT = 1.0  # an idle relay looks again after this long without a NOTIFY
BUSY_WAIT = 0.2  # another relay holds the queue: try again after this long


class Outbox(Protocol):
    """A queue whose pending jobs a relay takes, a batch per transaction."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def wait(self, timeout: float) -> None: ...

    async def relay(self, limit: int, send: Send) -> int | None: ...


@dataclass(slots=True)
class RelayStats:
    """What a relay run did."""

    relayed: int = 0
    batches: int = 0
    failures: int = 0
    refused: int = 0  # dead-lettered on PostgreSQL: RabbitMQ could never take them
    started_at: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        """Jobs relayed per second since the start."""
        return self.relayed / max(time.monotonic() - self.started_at, 1e-9)


class Relay:
    """Moves batches from ``outbox`` through ``send`` until stopped (or, ``once``, drained)."""

    def __init__(self, outbox: Outbox, publish: Publish, *, batch: int, backoff: Backoff,
                 logger: logging.Logger | None = None) -> None:
        self._outbox = outbox
        self._publish = publish
        self._batch = batch
        self._backoff = backoff
        self._log = logger or logging.getLogger("jobq.relay")
        self.stats = RelayStats()

    async def run(self, stop: asyncio.Event, *, once: bool = False) -> RelayStats:
        """Relay until ``stop`` is set; with ``once``, until a batch comes back empty."""
        failed = 0
        while not stop.is_set():
            refused = self.stats.refused
            try:
                moved = await self._outbox.relay(self._batch, self._send)
            except (TransportError, QueueFull) as exc:  # nothing marked: pending again
                self.stats.failures += 1
                failed += 1
                delay = self._backoff.delay(failed)
                self._log.warning("relay batch failed (%s); its jobs stay pending and are "
                                  "published again; retrying in %.1fs", describe(exc), delay)
                await _sleep(stop, delay)
                continue
            failed = 0
            if moved:
                self.stats.relayed += moved - (self.stats.refused - refused)
                self.stats.batches += 1
                continue
            if moved == 0 and once:
                break
            if moved is None and once:
                self._log.info("another relay holds this queue: leaving it to that one (--once)")
                break
            if moved is None:
                await _sleep(stop, BUSY_WAIT)
            else:
                waiting = asyncio.ensure_future(self._outbox.wait(IDLE_WAIT))
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                stopping.cancel()
        return self.stats

    async def _send(self, ids: Sequence[str], jobs: Sequence[NewJob]) -> dict[str, str]:
        """Publish the jobs RabbitMQ can take; the others' ids with the reason (the checks of
        every enqueue, which the publisher makes as it encodes each job)."""
        refused = {job_id: f"not relayed to RabbitMQ: {why}"
                   for job_id, why in (await self._publish(ids, jobs)).items()}
        if refused:
            self.stats.refused += len(refused)
            self._log.warning("%d jobs of this batch cannot be relayed (ids %s): dead-lettered "
                              "on PostgreSQL with the reason", len(refused),
                              ", ".join(list(refused)[:10]))
        return refused


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await within(stop.wait(), seconds)
