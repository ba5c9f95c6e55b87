"""The one boundary between the worker pool and a queue backend.

Only jobq's own types cross it. Implementations do not inherit from these Protocols;
mypy checks that each conforms (``container._conforming``), and
``tests/unit/test_conformance.py`` compares their signatures at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from jobq.core.attempts import AttemptError
from jobq.core.job import Decision, Delivery


class Transport(Protocol):
    """Hands out deliveries and carries out the pool's decision for each, exactly once."""

    async def open(self) -> None:
        """Connect (with retries and backoff) and prepare to receive."""

    async def close(self) -> None:
        """Flush pending settlements and disconnect."""

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Return up to ``max_count`` deliveries, waiting at most ``timeout`` s for the first.

        An empty list after the wait means nothing is eligible right now. Must be cancel-safe:
        the pool cancels a pending receive at shutdown, and whatever a cancelled receive had
        already taken from the backend must go back to it (not counted as an attempt).
        """

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's ``decision`` for ``delivery``, exactly once.

        ``Ack``: remove the job (may be batched). ``RetryIn``: run it again, not before
        ``delay`` seconds from now. ``Dead``: park it as dead with its reason. ``Cancelled``: an
        operator cancelled it; it ends so and never runs again. ``Release``: it was received
        and never started; back to the queue, its attempt not counted.

        An ``Ack`` raises SettleRejected when the backend finds that the job failed after all
        (Postgres transaction mode: its transaction could not commit, or the handler ended it).
        The delivery is then still unsettled, and the caller settles it again with the
        decision for a handler that raised ``SettleRejected.cause``.
        """

    async def quiesce(self) -> None:
        """Take nothing more until ``resume``, and hand back what was taken and not handed out.

        The pool calls it when the queue is paused and when it stops gracefully: the same
        motion. A transport the server pushes deliveries to stops them and hands back what
        arrived (attempt not counted); one that takes jobs ahead of a receive (Postgres
        transaction mode: picked ahead, or taken with an ack's COMMIT) hands those back and
        takes no more; one that only claims when asked has nothing to do. Idempotent.
        """

    async def resume(self) -> None:
        """Take jobs again after ``quiesce`` (the queue was resumed)."""

    def health(self) -> Health:
        """Whether the transport knows its server connection to be up, its own event counts
        (``metrics.TRANSPORT_COUNTERS``), and which jobs an operator cancelled: read at scrape,
        by /readyz and by the pool, with no round trip (safe from another thread)."""


@dataclass(frozen=True, slots=True)
class Health:
    """A transport's view of itself (``Transport.health``)."""

    connected: bool  # False while the transport knows its connection to the server is down
    counters: Mapping[str, int] = field(default_factory=dict)  # event counts by name
    # Ids of jobs an operator cancelled (``jobq jobs cancel``), as last read; it may name jobs
    # this consumer does not run. A fact: the pool cancels the handlers of those it runs, at
    # their next await, and settles them Cancelled.
    cancelled: AbstractSet[str] = frozenset()


@dataclass(frozen=True, kw_only=True, slots=True)
class NewJob:
    """What a producer enqueues; the backend assigns the id.

    ``delay`` (seconds) or ``run_at`` (an aware datetime; a time in the past means now): not
    before then, on either backend (docs/architecture.md, "Time").

    ``key``: while a job with this key is pending or running in its queue, an enqueue with it
    inserts nothing and returns that job's id (PostgreSQL; the RabbitMQ publisher refuses a
    keyed job, see docs/architecture.md, "Unique keys").

    ``priority``: 0 (the default) to 9; a due job of a higher priority is handed out before
    any of a lower one (PostgreSQL; RabbitMQ classic queues with ``rabbitmq.max_priority``:
    docs/architecture.md, "Priorities").
    """

    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int | None = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    key: str | None = None
    run_at: datetime | None = None
    priority: int = 0


class Publisher(Protocol):
    """Enqueues jobs on one backend; returns the ids given to them."""

    async def open(self) -> None:
        """Connect (with retries and backoff)."""

    async def close(self) -> None:
        """Flush and disconnect."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """Enqueue one job.

        Raises MalformedJob / JobTooLarge for a job that breaks the limits (nothing enqueued),
        and QueueFull when the queue stayed at ``limits.max_pending`` for ``timeout`` seconds
        (None: ``limits.enqueue_timeout``). ``connection``: the caller's own database
        connection, inside a transaction the job then commits with (PostgreSQL only; the
        RabbitMQ publisher refuses it with ConfigError).
        """

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """Enqueue a batch in as few round trips as the backend allows (errors as ``enqueue``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Depth:
    """Jobs in a queue by state as the server reports them, and the age of the oldest pending one.

    The states are the backend's own (Postgres: pending/running/dead; RabbitMQ:
    ready/unacked/dead/retry); a count is None where the backend cannot tell, and
    ``oldest_pending_seconds``: how long the longest-waiting job that is due has waited since
    it was due (a delayed job does not count before its time); None when nothing due waits or
    the backend cannot peek.
    """

    depth: Mapping[str, int | None]
    oldest_pending_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PauseState:
    """Whether a queue is paused and since when; from ``pause``/``resume``, whether they changed it.

    ``since`` is when the queue was paused (after a resume: the pause it ended); None when it
    is not paused, or when the backend could not tell.
    """

    paused: bool
    since: datetime | None = None
    changed: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadJob:
    """A dead-lettered job as ``jobq dead list`` shows it, on either backend.

    Values are as the backend holds them: ``id`` is an int on Postgres and the message_id
    text on RabbitMQ (None for a foreign message without one); ``finished_at`` a datetime, or
    the ``x-jobq-dead-at`` text of a RabbitMQ message.
    """

    id: int | str | None
    kind: str | None
    attempts: int | None
    max_attempts: int | None
    last_error: str | None
    finished_at: datetime | str | None
    payload: Any  # parsed JSON, or the text cut short when it does not parse
    errors: tuple[AttemptError, ...] = ()  # the latest failed attempts' (core/attempts.py)


JOB_STATES = ("pending", "running", "dead", "done", "cancelled")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobInfo:
    """One job as ``jobq jobs show`` and ``jobq jobs list`` give it, on either backend.

    ``state`` is one of ``JOB_STATES``. Values the backend does not keep are None (RabbitMQ
    knows a dead letter's headers, not when it was enqueued or which consumer ran it).
    ``worker`` is the claim that holds a running job (Postgres ``locked_by``); ``cancel_requested``
    says that ``jobq jobs cancel`` asked its consumer to stop it.
    """

    id: int | str | None
    kind: str | None
    state: str
    payload: Any  # parsed JSON, or the text cut short when it does not parse
    headers: Any = None
    attempts: int | None = None
    max_attempts: int | None = None
    last_error: str | None = None
    created_at: datetime | str | None = None
    run_at: datetime | None = None
    finished_at: datetime | str | None = None
    worker: str | None = None
    key: str | None = None
    cancel_requested: bool = False
    errors: tuple[AttemptError, ...] = ()  # the latest failed attempts', oldest first


class Inspect(Protocol):
    """An operator's view of one queue: set-up, depth, pause state, jobs by id and state."""

    async def init(self) -> str:
        """Create or upgrade what the queue needs (idempotent); one line saying what was done."""

    async def depth(self) -> Depth:
        """The queue's jobs by state (one cheap round trip: the monitor polls it)."""

    async def pause_state(self) -> PauseState:
        """Whether the queue is paused and since when (``jobq stats``)."""

    async def paused(self) -> bool:
        """Whether the queue is paused: one cheap round trip, asked by every consumer each second."""

    async def show_job(self, job_id: str) -> JobInfo:
        """One job of the queue by id; NoSuchJob (a ConfigError) when the queue has none such."""

    async def list_jobs(self, state: str, kind: str | None = None, limit: int = 100
                        ) -> list[JobInfo]:
        """Jobs of the queue in ``state`` (one of ``JOB_STATES``), of ``kind`` if given: pending
        ones in the order they will run, finished ones newest first. ConfigError (key
        ``--state``) for a state the backend cannot list (RabbitMQ: all but dead)."""

    async def queues(self) -> list[str]:
        """Every jobq queue this backend holds (this one among them once set up), sorted: the
        dashboard lists them all. TransportError when the backend cannot say."""


class Control(Protocol):
    """What an operator does to one queue: pause and resume it, prune it, cancel or retry a job."""

    async def pause(self) -> PauseState:
        """Pause the queue: its consumers take no new jobs until ``resume`` (a paused one stays
        as it is, ``changed`` False)."""

    async def resume(self) -> PauseState:
        """Let the queue's consumers take jobs again (``changed`` False if it was not paused)."""

    async def prune(self, state: str, older_than: float) -> int:
        """Delete the queue's jobs in ``state`` ("done" or "dead") that ended more than
        ``older_than`` seconds ago; how many. ConfigError (key ``--state``) for a state the
        backend keeps nothing of (RabbitMQ: done)."""

    async def cancel_job(self, job_id: str) -> str:
        """Cancel one job; one line saying what was done. A pending job never runs; a running one
        is told to stop at its next await and settles as cancelled, never retried. NoSuchJob for
        an unknown id (RabbitMQ cannot tell: a tombstone), ConfigError (key ``--id``) for a job
        that already ended."""

    async def retry_job(self, job_id: str) -> str:
        """Run one dead or delayed job now; one line saying what was done. A dead one gets a fresh
        set of attempts (as ``dead_requeue``); a delayed one keeps its attempts. NoSuchJob for an
        unknown id, ConfigError (key ``--id``) for a job in another state."""


class DeadLetters(Protocol):
    """One queue's dead jobs: listed with their error, requeued or purged."""

    async def dead_list(self, limit: int = 100) -> list[DeadJob]:
        """Dead jobs of the queue with their error, oldest first (they stay dead)."""

    async def dead_requeue(self, ids: Sequence[str] | None = None, kind: str | None = None
                           ) -> list[str]:
        """Give dead jobs (all, these ids, and/or this kind) a fresh set of attempts; their ids.

        Raises ConfigError naming the ids that are not dead jobs of the queue (nothing moved).
        """

    async def dead_purge(self, ids: Sequence[str] | None = None, kind: str | None = None
                         ) -> list[str]:
        """Delete dead jobs (chosen as ``dead_requeue``); their ids."""


class Admin(Inspect, Control, DeadLetters, Protocol):
    """All an operator does with one queue (`jobq`, the dashboard, the monitor), by role:
    ``Inspect``, ``Control`` and ``DeadLetters``, each a Protocol of its own."""
