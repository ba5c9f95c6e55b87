"""The values that travel through jobq: Job, Delivery and Outcome."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One unit of work as a handler sees it.

    ``attempt`` is 1 on the first delivery and counts every delivery since, crash
    redeliveries included. ``id`` is stable across redeliveries: use it for idempotency.
    ``context`` is backend-specific and optional: in Postgres transaction mode it is the
    ``psycopg.AsyncConnection`` whose transaction commits together with the ack, wrapped so
    that the handler cannot commit, roll back or close it (savepoints are fine).
    """

    id: str
    queue: str
    kind: str
    payload: Mapping[str, Any]
    attempt: int = 1
    max_attempts: int = 5
    enqueued_at: datetime | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    context: Any = field(default=None, compare=False, repr=False)

    @property
    def last_attempt(self) -> bool:
        """True when a retryable failure now would exhaust the job's attempts."""
        return self.attempt >= self.max_attempts


@dataclass(slots=True, eq=False)
class Delivery:
    """A Job plus the transport's opaque handle needed to settle it exactly once.

    ``malformed`` is set when the message could not be decoded; ``job`` then carries
    whatever could be recovered (at least an id) and the pool dead-letters it unrun.
    ``isolate`` is set by a transport for a job that was in flight when a consumer died: the
    pool runs it with nothing else in flight, so that if it kills this process too, the crash
    is its own and its backend can count it against that job alone (docs/architecture.md,
    "Crashes").
    """

    job: Job
    handle: Any
    malformed: str | None = None
    received_at: float = 0.0
    isolate: bool = False


class Outcome(enum.Enum):
    """How a delivery was settled."""

    ACK = "ok"
    RETRY = "retried"
    DEAD = "dead"
    RELEASE = "released"
    CANCELLED = "cancelled"
