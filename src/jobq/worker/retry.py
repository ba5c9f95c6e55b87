"""What a failure means: retry after a delay, or dead-letter with a reason."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jobq.core.backoff import Backoff
from jobq.core.errors import MalformedJob, PermanentError, Retry, describe
from jobq.core.job import Dead, Job, RetryIn


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Job retries: ``Backoff`` from ``base_delay`` capped at ``max_delay``, up to ``max_attempts``;
    a kind in ``by_kind`` (a task's own delays: ``@app.task(retry_delay=...)``) by its own."""

    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: bool = True
    rand: Callable[[], float] = random.random
    by_kind: Mapping[str, RetryPolicy] = field(default_factory=dict)

    def for_kinds(self, delays: Mapping[str, tuple[float | None, float | None]]) -> RetryPolicy:
        """This policy, with kind -> (base_delay, max_delay) of its own (None: this one's)."""
        if not delays:
            return self
        own = {kind: dataclasses.replace(
                   self, base_delay=self.base_delay if base is None else base,
                   max_delay=self.max_delay if most is None else most, by_kind={})
               for kind, (base, most) in delays.items()}
        return dataclasses.replace(self, by_kind=own)

    def backoff(self, attempt: int) -> float:
        """Delay before the retry that follows failed attempt number ``attempt`` (1-based)."""
        return Backoff(base=self.base_delay, cap=self.max_delay, jitter=self.jitter,
                       rand=self.rand).delay(attempt)

    def decide(self, error: BaseException, job: Job) -> RetryIn | Dead:
        """Decide the outcome of ``job`` failing with ``error``."""
        if self.by_kind and job.kind in self.by_kind:
            return self.by_kind[job.kind].decide(error, job)
        reason = describe(error)
        if isinstance(error, PermanentError | MalformedJob):
            return Dead(reason)
        if job.last_attempt:
            return Dead(f"{reason} (gave up after {job.attempt} of {job.max_attempts} attempts)")
        if isinstance(error, Retry) and error.delay is not None:
            return RetryIn(max(0.0, min(float(error.delay), self.max_delay)), reason)
        return RetryIn(self.backoff(job.attempt), reason)
