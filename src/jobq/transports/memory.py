"""An in-memory transport and publisher: the pool's semantics without a server (tests, examples)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobq.core.attempts import ERRORS_KEPT, AttemptError
from jobq.core.due import due_problem, wait_of
from jobq.core.errors import ConfigError, MalformedJob
from jobq.core.job import Decision, Delivery, Job
from jobq.core.port import Health, NewJob
from jobq.core.within import within
from jobq.transports.common import carry_out


@dataclass(slots=True)
class Entry:
    """One job in the memory store."""

    id: str
    kind: str
    payload: Any
    max_attempts: int
    status: str = "pending"
    attempts: int = 0
    run_at: float = 0.0
    last_error: str | None = None
    cancel_requested: bool = False  # set by a test, as `jobq jobs cancel` of a running job
    history: list[str] = field(default_factory=list)
    priority: int = 0  # 0-9: a due job of a higher one is handed out first
    isolate: bool = False  # its consumer was lost while it ran: it runs alone next time
    errors: list[AttemptError] = field(default_factory=list)  # the latest attempts' errors
    key: str | None = None  # NewJob.key: unique while pending or running

    def failed(self, reason: str, error: AttemptError | None) -> None:
        """Keep ``reason`` as the last error and ``error`` in the history (attempts.py)."""
        self.last_error = reason
        if error is not None:
            self.errors = [*self.errors, error][-ERRORS_KEPT:]


class MemoryStore:
    """The shared 'server': jobs by id, for one or more MemoryTransports."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._ids = itertools.count(1)
        self.changed = asyncio.Event()

    def add(self, kind: str, payload: Any, *, max_attempts: int = 5, delay: float = 0.0,
            priority: int = 0) -> str:
        """Enqueue a job (``payload`` may be anything, to model malformed input)."""
        job_id = str(next(self._ids))
        self.entries[job_id] = Entry(job_id, kind, payload, max_attempts,
                                     run_at=time.monotonic() + delay, priority=priority)
        self.changed.set()
        return job_id

    def by_status(self, status: str) -> list[Entry]:
        """Entries in ``status``."""
        return [e for e in self.entries.values() if e.status == status]


class MemoryTransport:
    """Transport over a MemoryStore, with the same semantics as the Postgres lease mode: due
    jobs by priority, then in order; a job handed out and not settled when its transport
    closes (its consumer lost) goes back, its attempt not counted, to run alone."""

    connected = True  # nothing to lose; tests set it to model a lost connection

    def __init__(self, store: MemoryStore, *, queue: str = "default") -> None:
        self.store = store
        self.queue = queue
        self.calls: list[tuple[str, str]] = []
        self._out: dict[str, Entry] = {}  # handed out, not settled

    async def open(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """As a server whose consumer's connection closed: what was handed out and not
        settled goes back, attempt not counted (the loss may not be the job's), to run alone."""
        for entry in self._out.values():
            if entry.status == "running":
                entry.status, entry.isolate = "pending", True
                entry.attempts -= 1
                entry.history.append("lost")
        self._out.clear()
        self.store.changed.set()

    def health(self) -> Health:
        """``connected`` as a test set it; no counters (nothing is rescued, reconnected or
        stale); the running jobs whose entry has ``cancel_requested`` set."""
        entries = list(self.store.entries.values())  # one step: the metrics thread reads it too
        return Health(self.connected, cancelled=frozenset(
            e.id for e in entries if e.cancel_requested and e.status == "running"))

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        """Claim due pending entries; wait up to ``timeout`` for one to appear."""
        deadline = time.monotonic() + timeout
        while True:
            self.store.changed.clear()
            now = time.monotonic()
            due = sorted((e for e in self.store.entries.values()
                          if e.status == "pending" and e.run_at <= now),
                         key=lambda e: -e.priority)[:max_count]  # stable: in order within one
            if due or now >= deadline:
                return [self._deliver(e) for e in due]
            with contextlib.suppress(TimeoutError):
                await within(self.store.changed.wait(), min(0.01, deadline - now))

    def _deliver(self, entry: Entry) -> Delivery:
        entry.status = "running"
        entry.attempts += 1
        self._out[entry.id] = entry
        payload = entry.payload
        malformed = None if isinstance(payload, Mapping) else (
            f"payload is not a JSON object (got {type(payload).__name__})")
        job = Job(id=entry.id, queue=self.queue, kind=entry.kind,
                  payload=payload if malformed is None else {}, attempt=entry.attempts,
                  max_attempts=entry.max_attempts)
        if entry.isolate:
            job = dataclasses.replace(job, redelivered=True)
        return Delivery(job=job, handle=entry, malformed=malformed, isolate=entry.isolate)

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        """Carry out the worker's decision for ``delivery`` (``Transport.settle``)."""
        await carry_out(self, delivery, decision)

    async def _ack(self, delivery: Delivery) -> None:
        """Mark done."""
        self._settle(delivery, "done", "ack")

    async def _retry(self, delivery: Delivery, delay: float, reason: str,
                     error: AttemptError | None) -> None:
        """Back to pending after ``delay``."""
        entry = self._settle(delivery, "pending", "retry")
        entry.run_at = time.monotonic() + delay
        entry.failed(reason, error)

    async def _dead(self, delivery: Delivery, reason: str, error: AttemptError | None) -> None:
        """Mark dead with the reason."""
        self._settle(delivery, "dead", "dead").failed(reason, error)

    async def quiesce(self) -> None:
        """Nothing is pushed or taken ahead here: only recorded, for tests."""
        self.calls.append(("quiesce", ""))

    async def resume(self) -> None:
        """Only recorded, for tests."""
        self.calls.append(("resume", ""))

    async def _cancel(self, delivery: Delivery, reason: str) -> None:
        """Mark cancelled with the reason."""
        self._settle(delivery, "cancelled", "cancel").last_error = reason

    async def _release(self, delivery: Delivery) -> None:
        """Back to pending, attempt not counted."""
        entry = self._settle(delivery, "pending", "release")
        entry.attempts -= 1
        entry.isolate = delivery.isolate  # one that was to run alone still is

    def _settle(self, delivery: Delivery, status: str, call: str) -> Entry:
        entry: Entry = delivery.handle
        if entry.status != "running":
            raise AssertionError(f"job {entry.id} settled twice ({call} after {entry.history})")
        entry.status = status
        entry.isolate = False
        self._out.pop(entry.id, None)
        entry.history.append(call)
        self.calls.append((call, entry.id))
        self.store.changed.set()
        return entry


def through_json(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` as it comes back from JSON, as on the wire: what would not encode there
    fails here too (MalformedJob)."""
    try:
        decoded: dict[str, Any] = json.loads(json.dumps(payload))
    except (TypeError, ValueError) as exc:
        raise MalformedJob(f"payload is not JSON: {exc}") from None
    return decoded


class MemoryPublisher:
    """Publisher over a MemoryStore (``transport: memory``; ``jobq.testing``)."""

    def __init__(self, store: MemoryStore, *, max_attempts: int = 5) -> None:
        self.store = store
        self._max_attempts = max_attempts  # a job's when it gives none (retry.max_attempts)

    async def open(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to flush."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """Add one job (no depth limit: ``timeout`` is accepted and unused; no transactions)."""
        if connection is not None:
            raise ConfigError("the memory store has no transactions to join", key="transport")
        problem = due_problem(job)
        if problem:
            raise MalformedJob(problem)
        if job.key is not None:  # as PostgreSQL: one pending or running job per key
            held = next((e.id for e in self.store.entries.values() if e.key == job.key
                         and e.status in ("pending", "running")), None)
            if held is not None:
                return held
        job_id = self.store.add(job.kind, through_json(job.payload),
                                max_attempts=job.max_attempts or self._max_attempts,
                                delay=wait_of(job, datetime.now(UTC)), priority=job.priority)
        self.store.entries[job_id].key = job.key
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """Add several jobs."""
        return [await self.enqueue(job, connection=connection) for job in jobs]
