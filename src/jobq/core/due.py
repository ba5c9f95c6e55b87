"""When a new job is due: ``NewJob.delay`` or ``NewJob.run_at``, checked once, as seconds from now.

Both backends take the wait in seconds from the producer's clock: Postgres adds it to the
server's ``now()``, RabbitMQ carries ``now + wait`` (epoch seconds) in the ``x-jobq-due``
header and its consumers compare that with their own clock (see docs/architecture.md, "Time").
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from jobq.core.port import NewJob

# At most this far ahead: ten years. Further is a unit mistake (milliseconds for seconds).
MAX_WAIT = 10 * 365 * 86400.0


def delay_problem(delay: object) -> str | None:
    """Why ``delay`` cannot be a job's delay in seconds, or None."""
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        return f"delay must be a number of seconds, got {type(delay).__name__} {delay!r:.40}"
    if not math.isfinite(delay) or delay < 0:
        return f"delay must be finite and >= 0 seconds, got {delay!r}"
    if delay > MAX_WAIT:
        return f"delay of {delay:g} s is more than ten years (seconds, not milliseconds?)"
    return None


def run_at_problem(run_at: object) -> str | None:
    """Why ``run_at`` cannot be a job's due time, or None (None is fine: due now)."""
    if run_at is None:
        return None
    if not isinstance(run_at, datetime):
        return f"run_at must be a datetime, got {type(run_at).__name__} {run_at!r:.40}"
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        return (f"run_at must be timezone-aware (got the naive {run_at.isoformat()}): "
                f"e.g. datetime.now(UTC) + timedelta(hours=1)")
    return None


def due_problem(job: NewJob) -> str | None:
    """Why ``job``'s delay or run_at is unusable (both set included), or None."""
    problem = delay_problem(job.delay) or run_at_problem(job.run_at)
    if problem is None and job.run_at is not None:
        if job.delay:
            problem = "give either delay or run_at, not both"
        elif (job.run_at - datetime.now(UTC)) / timedelta(seconds=1) > MAX_WAIT:
            problem = f"run_at {job.run_at.isoformat()} is more than ten years ahead"
    return problem


def wait_of(job: NewJob, now: datetime) -> float:
    """Seconds from ``now`` (aware) until ``job`` is due; 0 for a time in the past.

    ``job`` has passed ``due_problem``.
    """
    if job.run_at is None:
        return float(job.delay)
    return max(0.0, (job.run_at - now) / timedelta(seconds=1))
