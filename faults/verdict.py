"""The fault suite's pass condition: a pure function from one run's counts to why it failed.

The duplicate bound. A consumer that is killed, or that loses its connections (a server
restart, pg_terminate_backend, a closed AMQP connection), may lose at most what it holds: its
capacity, ``consumer.concurrency + consumer.buffer`` (in lease mode with the buffer left to jobq,
as far as jobq may grow it; the RabbitMQ prefetch, which defaults to
the same), read from the settings the suite starts consumers with. Each such loss is one
exposure; a job held then may have completed (recorded) without its ack landing, and runs
again. So a run may show at most ``capacity x exposures`` duplicates, where exposures = kills +
the live consumers at each server restart or crash + the consumers cut at each cut round. More
means jobs ran twice that no fault put at risk.

A server crash costs more than a restart: what it exposes in the consumers (every live one,
as a restart does), and what it undoes in the server. Postgres claims and acks commit
asynchronously (``synchronous_commit = off``, queries.sql): their commit returns before the
WAL reaches disk, and the WAL writer flushes it within 3 x ``wal_writer_delay`` (200 ms by
default). ``pg_ctlcluster stop -m immediate`` (or a power cut) loses what it had not yet
written: an undone claim puts its jobs back to pending, an undone ack leaves its job running
until the lease expires. Either way those jobs run again, duplicates, never a loss. Jobs held
then are in the capacity term; jobs already completed and acked are not, so a crash
also allows every job recorded in its window, 3 x ``wal_writer_delay`` + the ack flush interval
(+ slack for a slow flush) before the server went down, counted from the completion record
around the crash (``crash_window_jobs``). Transaction mode commits each job's end
synchronously: its window is 0. RabbitMQ's is 0 too, a crash counted exactly like a restart;
caveat, not measured here: an ack still in a socket, or received but not yet made durable
(a quorum queue's settle before its WAL sync), comes back after a kill -9 of the node, so a
RabbitMQ crash that overshoots the bound by a handful of jobs points there first.

Dead jobs. The suite's only deliberate failures are retryable and never fall on a job's last
attempt (tests.processors:record), so no job is meant to die: every dead job is a fault that
cost attempts it should not have, or a bug. A job both recorded as completed and dead had its
work done and was then buried anyway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass


def duplicate_bound(capacity: int, exposures: int, crash_window_jobs: int = 0) -> int:
    """Duplicates a run may show: ``capacity`` per exposure, plus the jobs completed in the
    crash windows (see the module)."""
    return capacity * exposures + crash_window_jobs


@dataclass(frozen=True, kw_only=True)
class Counts:
    """What the verdict needs from one run: the findings and what they are held against."""

    lost: int
    unfinished: int
    dead: int
    dead_expected: int = 0
    done_and_dead: int
    duplicates: int
    duplicate_bound: int
    survivors: int
    survivors_exit_0: int


def verdict(counts: Counts) -> list[str]:
    """Why the run failed, one line per broken condition; empty when it passed."""
    c, failures = counts, []
    if c.lost:
        failures.append(f"{c.lost} job(s) lost")
    if c.unfinished:
        failures.append(f"{c.unfinished} job(s) neither done nor dead")
    if c.dead > c.dead_expected:
        failures.append(f"{c.dead - c.dead_expected} job(s) dead where {c.dead_expected} "
                        f"were meant to die")
    if c.done_and_dead:
        failures.append(f"{c.done_and_dead} job(s) recorded both done and dead")
    if c.duplicates > c.duplicate_bound:
        failures.append(f"{c.duplicates} duplicates, more than the bound {c.duplicate_bound} "
                        f"(capacity x exposures + jobs done in crash windows)")
    if c.survivors_exit_0 < c.survivors:
        failures.append(f"{c.survivors - c.survivors_exit_0} of {c.survivors} survivors did "
                        f"not exit 0 on SIGTERM")
    return failures


@dataclass(frozen=True)
class Tally:
    """The ids behind the counts: what the record and the backend's final state disagree on."""

    lost: set[str]
    done_unrecorded: set[str]  # done in the backend, never completed: acked unrun work
    done_and_dead: set[str]
    strangers: set[str]  # recorded, never enqueued
    duplicates: int


def tally(accepted: Collection[str], recorded: Counter[str], done: Collection[str],
          dead: Mapping[str, str], waiting: Collection[str] = ()) -> Tally:
    """Compare the accepted ids with the completion record and the backend's done and dead.

    A job still ``waiting`` in the backend (a run that timed out) is unfinished, not lost."""
    accepted_set = set(accepted)
    done_unrecorded = set(done) - set(recorded)
    lost = ((accepted_set - set(recorded) - set(dead) - set(waiting))
            | (done_unrecorded & accepted_set))
    return Tally(lost=lost, done_unrecorded=done_unrecorded,
                 done_and_dead=set(recorded) & set(dead),
                 strangers=set(recorded) - accepted_set,
                 duplicates=sum(n - 1 for n in recorded.values()))
