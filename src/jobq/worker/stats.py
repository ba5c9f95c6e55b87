"""What a pool run did (``PoolStats``) and who hears of each settle (``PoolObserver``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from jobq.core.job import Decision, Job


class PoolObserver(Protocol):
    """Receives the pool's events (metrics); must be cheap, it runs on the hot path."""

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None: ...

    def gauges(self, in_flight: int, buffered: int) -> None: ...


@dataclass(slots=True)
class PoolStats:
    """What a pool run did, for the exit summary."""

    ok: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0  # by an operator while they ran (jobq jobs cancel)
    released: int = 0
    settle_failures: int = 0
    receive_failures: int = 0  # receives (claims) that failed, however many succeeded after
    not_written: int = 0  # of ``ok``, acks the transport dropped: the job was no longer ours
    worker_deaths: int = 0
    started_at: float = field(default_factory=time.monotonic)
    first_job_at: float | None = None
    last_job_at: float | None = None

    @property
    def settled(self) -> int:
        """Jobs that ran (or were dead-lettered unrun) and were settled."""
        return self.ok + self.retried + self.dead + self.cancelled

    @classmethod
    def combined(cls, runs: list[PoolStats]) -> PoolStats:
        """The counts of several pools' runs (a consumer's queues) as one run's."""
        firsts = [s.first_job_at for s in runs if s.first_job_at is not None]
        lasts = [s.last_job_at for s in runs if s.last_job_at is not None]
        return cls(ok=sum(s.ok for s in runs), retried=sum(s.retried for s in runs),
                   dead=sum(s.dead for s in runs), cancelled=sum(s.cancelled for s in runs),
                   released=sum(s.released for s in runs),
                   settle_failures=sum(s.settle_failures for s in runs),
                   receive_failures=sum(s.receive_failures for s in runs),
                   not_written=sum(s.not_written for s in runs),
                   worker_deaths=sum(s.worker_deaths for s in runs),
                   started_at=min((s.started_at for s in runs), default=time.monotonic()),
                   first_job_at=min(firsts, default=None), last_job_at=max(lasts, default=None))

    def rate(self) -> float:
        """Settled jobs per second between the first receive and the last settle."""
        if self.first_job_at is None or self.last_job_at is None:
            return 0.0
        return self.settled / max(self.last_job_at - self.first_job_at, 1e-9)

