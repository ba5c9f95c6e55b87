"""What a failure means: retry after a delay, or dead-letter with a reason."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from jobq.errors import MalformedJob, PermanentError, Retry, describe
from jobq.job import Job


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """``retry`` with ``delay`` seconds, or dead-letter; ``reason`` is kept with the job."""

    retry: bool
    delay: float
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped, bounded by the job's ``max_attempts``.

    The n-th retry waits ``uniform(0, min(cap, base * 2**(n-1)))`` ("full jitter"), which
    spreads a burst of failures instead of retrying them all in lock-step.
    """

    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: bool = True
    rand: Callable[[], float] = random.random

    def backoff(self, attempt: int) -> float:
        """Delay before the retry that follows failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** max(0, attempt - 1))
        return ceiling * self.rand() if self.jitter else ceiling

    def decide(self, error: BaseException, job: Job) -> RetryDecision:
        """Decide the outcome of ``job`` failing with ``error``."""
        reason = describe(error)
        if isinstance(error, PermanentError | MalformedJob):
            return RetryDecision(False, 0.0, reason)
        if job.last_attempt:
            return RetryDecision(
                False, 0.0, f"{reason} (gave up after {job.attempt} of {job.max_attempts} attempts)"
            )
        if isinstance(error, Retry) and error.delay is not None:
            return RetryDecision(True, max(0.0, min(float(error.delay), self.max_delay)), reason)
        return RetryDecision(True, self.backoff(job.attempt), reason)
