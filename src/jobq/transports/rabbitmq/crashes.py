"""What becomes of a crash redelivery: a copy to run alone, its attempt counted only if it ran alone.

A message the broker hands out again (``redelivered``, or ``x-delivery-count`` > 0 on quorum
queues) was in flight when a consumer died or lost its channel. Which of that consumer's jobs
caused it cannot be told, so the redelivery never runs: the consumer publishes a copy marked
``x-jobq-isolate`` to ``<q>.alone`` and acks the original. A copy is run with nothing
else in flight (``Delivery.isolate``), so if its consumer dies again the crash is its own.

- not marked: the crashed run may never have started; the copy keeps the attempt it had.
- marked (it ran alone, or was about to): the crash counts; attempt + 1, or dead when that
  exceeds ``max_attempts``.

On a classic queue the first redelivery of a message is not copied to run alone but back to
the work queue, marked ``x-jobq-suspect`` (attempt kept), to run with the others; only a
suspect that comes back redelivered again goes to ``<q>.alone``. A classic queue that recovers
from a crash of its broker marks every message it held redelivered, delivered before or not
(RabbitMQ 3.10, queue index v1 and v2 alike): run alone one by one, its whole backlog would
drain at one job at a time per consumer. A job that kills its consumer every time costs one
crash more there (two unattributed, then its runs alone). Quorum queues keep the old rule:
the fault suite's crash of the broker does not slow their drain (``x-delivery-count`` counts
deliveries in the queue's replicated log).

See docs/architecture.md, "Crashes".
"""

from __future__ import annotations

from dataclasses import dataclass

from jobq.core.job import Job


@dataclass(frozen=True, slots=True)
class CrashCopy:
    """The copy to publish (its ``x-jobq-attempt``; with ``suspect``, back to the work queue
    marked ``x-jobq-suspect``, else to ``<q>.alone``), or, with ``dead`` set, the reason to
    bury it."""

    attempt: int
    dead: str | None = None
    suspect: bool = False


def crash_copy(job: Job, *, isolated: bool, first: bool = False) -> CrashCopy:
    """What to publish for ``job``, redelivered after a crash; ``isolated``: it was marked to
    run alone; ``first``: a classic queue's first redelivery of it (the suspect step)."""
    if first:
        return CrashCopy(job.attempt, suspect=True)  # refunded, and not alone yet
    if not isolated:
        return CrashCopy(job.attempt)  # refunded: the crash cannot be attributed to it
    if job.attempt + 1 > job.max_attempts:
        return CrashCopy(job.attempt, dead=(
            f"lost mid-job: killed or stalled its consumer while running alone on attempt "
            f"{job.attempt} of {job.max_attempts} (a crash, or an event loop it blocked past the "
            "heartbeat, which lost the connection; each on a run alone counts an attempt)"))
    return CrashCopy(job.attempt + 1)
