"""``jobq move``: a queue's waiting or dead jobs from one backend to the other.

So that switching a queue that still holds jobs is configuration too: stop its consumers,
move, start the consumers of the other backend. A job keeps its id (where the target can
hold it), its attempts, what is left of its delay, its priority and its last error. The
source hands its jobs over a batch at a time (``Source.move_out``) and lets go of a batch only
after the target has it for good (``Sink.move_in``: committed, or confirmed): a move killed
halfway leaves each job in the source, in the target, or, for the batch in flight, in both
(moved twice, under the same id; moving it again into PostgreSQL then inserts nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

MOVE_STATES = ("pending", "dead")


@dataclass(frozen=True, kw_only=True, slots=True)
class MovedJob:
    """One job between backends: what either can hold of it."""

    id: str
    kind: str
    payload: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    attempts: int = 0  # used so far
    max_attempts: int = 5
    run_at: datetime | None = None  # not before then (None: now)
    last_error: str | None = None
    dead: bool = False
    finished_at: datetime | None = None  # when it died
    priority: int = 0


Send = Callable[[Sequence[MovedJob]], Awaitable[None]]


@dataclass(slots=True)
class MoveReport:
    """What a move did, for its summary line."""

    moved: int = 0
    batches: int = 0
    renamed: int = 0  # jobs whose id the target could not keep (a new one was given)
    left: int = 0  # jobs the source could not hand over (said why in the log)


class Source(Protocol):
    """A backend's jobs of one queue, handed over a batch at a time."""

    async def move_out(self, state: str, kind: str | None, batch: int, send: Send,
                       report: MoveReport) -> None:
        """Every job of the queue in ``state`` (of ``kind`` if given), ``batch`` at a time:
        ``send`` each batch, and let go of it (delete, ack) only once ``send`` returned."""


class Sink(Protocol):
    """A backend taking jobs into one queue."""

    async def move_in(self, jobs: Sequence[MovedJob], report: MoveReport) -> None:
        """Hold ``jobs`` for good before returning (committed, or confirmed by the broker)."""


async def move(source: Source, sink: Sink, *, state: str, kind: str | None,
               batch: int) -> MoveReport:
    """Move the queue's ``state`` jobs from ``source`` to ``sink``."""
    report = MoveReport()

    async def send(jobs: Sequence[MovedJob]) -> None:
        await sink.move_in(jobs, report)
        report.moved += len(jobs)
        report.batches += 1

    await source.move_out(state, kind, batch, send, report)
    return report
