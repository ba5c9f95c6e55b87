"""The values that travel through jobq: Job, Delivery, Outcome and the worker's Decision."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from jobq.core.attempts import AttemptError


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One unit of work as a handler sees it.

    ``attempt`` is 1 on the first run and counts the runs that failed since; a run lost with
    its consumer (a crash, a lost lease or connection) is not counted the first time, since
    the job may never have started (docs/architecture.md, "Crashes"). ``redelivered`` is True
    once a run of this job was lost that way: that run may have done some or all of its work,
    so with ``redelivered`` (or ``attempt > 1``) the handler may not be the first to run it.
    ``id`` is stable across redeliveries: use it for idempotency.
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
    redelivered: bool = False

    @property
    def last_attempt(self) -> bool:
        """True when a retryable failure now would exhaust the job's attempts."""
        return self.attempt >= self.max_attempts


@dataclass(slots=True, eq=False)
class Delivery:
    """A Job plus the transport's opaque handle needed to settle it exactly once.

    ``malformed`` is set when the message could not be decoded; ``job`` then carries
    whatever could be recovered (at least an id) and the pool dead-letters it unrun.
    ``isolate`` is set by a transport for a job that was in flight when a consumer died (a
    suspect): the pool runs its suspects one at a time, beside its other work, so that if one
    kills this process too, its backend can charge the crash to it and to no other suspect
    (docs/architecture.md, "Crashes"). ``fact``: what the transport found that keeps a
    well-formed job from running (``Spent``, ``CancelRequested``); the pool decides what it
    means and never runs it.
    """

    job: Job
    handle: Any
    malformed: str | None = None
    received_at: float = 0.0
    isolate: bool = False
    fact: Fact | None = None
    # The transport's test, asked just before the job would start, of whether it still holds
    # this delivery (its lease may have expired, its channel closed: after a blocked event
    # loop, say). A delivery it no longer holds is never started: another consumer may run it.
    lapsed: Callable[[Delivery], bool] | None = None


@dataclass(frozen=True, slots=True)
class Spent:
    """A fact: the job's attempts were used up before this delivery could run (crashes that
    counted, or a foreign attempt header over max_attempts); ``reason`` says how."""

    reason: str


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """A fact: an operator cancelled the job (``jobq jobs cancel``) before it started."""


Fact = Spent | CancelRequested


class Outcome(enum.Enum):
    """How a delivery was settled."""

    ACK = "ok"
    RETRY = "retried"
    DEAD = "dead"
    RELEASE = "released"
    CANCELLED = "cancelled"


# What the worker decided for a delivery: the one value a transport's ``settle`` carries out.
# Only the worker makes these (``jobq.worker.settler``); a transport reports facts about a delivery
# (``Delivery.malformed``, ``Delivery.fact``) and never builds one of its own.


@dataclass(frozen=True, slots=True)
class Ack:
    """The job succeeded: remove it from the queue (may be batched)."""

    outcome: ClassVar[Outcome] = Outcome.ACK
    reason: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class RetryIn:
    """Run the job again, not before ``delay`` seconds from now; ``reason`` is kept with it,
    and ``error`` (what the attempt raised, if it raised) added to its history."""

    delay: float
    reason: str
    error: AttemptError | None = None
    outcome: ClassVar[Outcome] = Outcome.RETRY


@dataclass(frozen=True, slots=True)
class Dead:
    """Park the job as dead, keeping ``reason`` beside it (and ``error``, as ``RetryIn``)."""

    reason: str
    error: AttemptError | None = None
    outcome: ClassVar[Outcome] = Outcome.DEAD


@dataclass(frozen=True, slots=True)
class Cancelled:
    """An operator cancelled the job (``jobq jobs cancel``): it ends so and never runs again."""

    reason: str
    outcome: ClassVar[Outcome] = Outcome.CANCELLED


@dataclass(frozen=True, slots=True)
class Release:
    """Received and never started: back to the queue, its attempt not counted."""

    outcome: ClassVar[Outcome] = Outcome.RELEASE
    reason: ClassVar[str] = ""


Decision = Ack | RetryIn | Dead | Cancelled | Release
ACK = Ack()
RELEASE = Release()
