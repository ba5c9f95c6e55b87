"""Per-kind job metrics with bounded cardinality: the kinds a config names, the rest "other".

A failure rate per job kind is what an operator asks for first, and a label per kind is what
blows up a Prometheus server when kinds are data (a kind per customer, a typo'd producer).
So only the kinds named in ``metrics.kinds`` (default: those of ``consumer.processors``) get
series of their own; every other kind is counted as ``other``. At most MAX_KINDS are named.
Plain numbers on the hot path, families built at scrape, as ``metrics_jobs`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from jobq.observability.metrics_jobs import LABELS, Buckets

OTHER = "other"
MAX_KINDS = 100


class _Kind:
    __slots__ = ("duration", "errors", "outcomes")

    def __init__(self, outcomes: Sequence[str], buckets: Sequence[float]) -> None:
        self.outcomes = dict.fromkeys(outcomes, 0)
        self.errors: dict[str, int] = {}
        self.duration = Buckets(buckets)


class KindCounts(Collector):
    """Settled jobs by kind and outcome, failed attempts by kind and error, duration by kind."""

    def __init__(self, labels: Sequence[str], kinds: Iterable[str], outcomes: Sequence[str],
                 duration_buckets: Sequence[float]) -> None:
        self.labels = tuple(labels)
        self._outcomes = tuple(outcomes)
        self._buckets = tuple(duration_buckets)
        self._named = frozenset(kinds)
        self._by: dict[str, _Kind] = {}

    def settled(self, kind: str, outcome: str, duration: float, error: str | None) -> None:
        """Count one settled job (hot path: a dict lookup and a few additions)."""
        label = kind if kind in self._named else OTHER
        counts = self._by.get(label)
        if counts is None:
            counts = self._by[label] = _Kind(self._outcomes, self._buckets)
        counts.outcomes[outcome] += 1
        counts.duration.observe(duration)
        if error is not None:
            counts.errors[error] = counts.errors.get(error, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The three families, one series per kind seen (named or ``other``)."""
        by = list(self._by.items())
        jobs = CounterMetricFamily("jobq_kind_jobs", "Jobs settled, by kind and outcome (kinds "
                                   "not in metrics.kinds count as other).",
                                   labels=(*LABELS, "kind", "outcome"))
        errors = CounterMetricFamily("jobq_kind_job_errors", "Failed attempts, by kind and "
                                     "exception type.", labels=(*LABELS, "kind", "error"))
        duration = HistogramMetricFamily("jobq_kind_job_duration_seconds",
                                         "Handler run time, by kind.",
                                         labels=(*LABELS, "kind"))
        for kind, counts in by:
            for outcome, n in list(counts.outcomes.items()):
                jobs.add_metric([*self.labels, kind, outcome], n)
            for name, n in list(counts.errors.items()):
                errors.add_metric([*self.labels, kind, name], n)
            buckets, total = counts.duration.cumulative()
            duration.add_metric([*self.labels, kind], buckets, sum_value=total)
        yield jobs
        yield errors
        yield duration
