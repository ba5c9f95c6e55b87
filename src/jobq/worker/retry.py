"""What a failure means: retry after a delay, or dead-letter with a reason."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from jobq.core.backoff import Backoff
from jobq.core.errors import MalformedJob, PermanentError, Retry, describe
from jobq.core.job import Dead, Job, RetryIn


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Job retries: ``Backoff`` from ``base_delay`` capped at ``max_delay``, up to ``max_attempts``."""

    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: bool = True
    rand: Callable[[], float] = random.random

    def backoff(self, attempt: int) -> float:
        """Delay before the retry that follows failed attempt number ``attempt`` (1-based)."""
        return Backoff(base=self.base_delay, cap=self.max_delay, jitter=self.jitter,
                       rand=self.rand).delay(attempt)

    def decide(self, error: BaseException, job: Job) -> RetryIn | Dead:
        """Decide the outcome of ``job`` failing with ``error``."""
        reason = describe(error)
        if isinstance(error, PermanentError | MalformedJob):
            return Dead(reason)
        if job.last_attempt:
            return Dead(f"{reason} (gave up after {job.attempt} of {job.max_attempts} attempts)")
        if isinstance(error, Retry) and error.delay is not None:
            return RetryIn(max(0.0, min(float(error.delay), self.max_delay)), reason)
        return RetryIn(self.backoff(job.attempt), reason)
