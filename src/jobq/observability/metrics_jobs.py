"""Per-job metrics as plain numbers on the hot path, turned into Prometheus families on scrape.

prometheus_client's Counter.inc and Histogram.observe take a lock and walk Python objects:
about 2 us for the five per-job series, a fifth of a no-op job's cost in the consumer. Here a
settled job is a few integer additions in the event loop's thread; the scrape thread reads
the numbers (a list copy is a consistent snapshot under the GIL) and builds the same families
(names, help, labels, buckets) the client library would.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LABELS = ("transport", "queue")


def _le(bound: float) -> str:
    """A bucket bound as Prometheus writes it (``1.0``, ``+Inf``)."""
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


class Buckets:
    """A histogram's counts per bucket (the last one is +Inf) and its sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one value in the first bucket whose bound is >= it (Prometheus' ``le``)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """The buckets as Prometheus exposes them (``le`` bound, cumulative count) and the sum."""
        counts, total = list(self.counts), self.sum
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            cumulative.append((_le(bound), running))
        return cumulative, total

    def family(self, name: str, text: str, labels: Sequence[str]) -> HistogramMetricFamily:
        """The histogram family with cumulative buckets, for one label set."""
        cumulative, total = self.cumulative()
        family = HistogramMetricFamily(name, text, labels=LABELS)
        family.add_metric(list(labels), cumulative, sum_value=total)
        return family


class JobCounts(Collector):
    """Settled jobs by outcome, failed attempts by error type, redeliveries, duration, latency."""

    def __init__(self, labels: Sequence[str], outcomes: Sequence[str],
                 duration_buckets: Sequence[float], latency_buckets: Sequence[float]) -> None:
        self.labels = tuple(labels)
        self.outcomes = dict.fromkeys(outcomes, 0)
        self.errors: dict[str, int] = {}
        self.redeliveries = 0
        self.duration = Buckets(duration_buckets)
        self.latency = Buckets(latency_buckets)

    def error(self, name: str) -> None:
        """Count one failed attempt of exception type ``name``."""
        self.errors[name] = self.errors.get(name, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The families, as prometheus_client's Counter and Histogram would expose them."""
        jobs = CounterMetricFamily("jobq_jobs", "Jobs settled, by outcome.",
                                   labels=(*LABELS, "outcome"))
        for outcome, count in list(self.outcomes.items()):
            jobs.add_metric([*self.labels, outcome], count)
        yield jobs
        errors = CounterMetricFamily("jobq_job_errors", "Failed attempts, by exception type.",
                                     labels=(*LABELS, "error"))
        for name, count in list(self.errors.items()):
            errors.add_metric([*self.labels, name], count)
        yield errors
        yield self.duration.family("jobq_job_duration_seconds", "Handler run time.", self.labels)
        yield self.latency.family("jobq_job_latency_seconds",
                                  "End to end: enqueued until settled as done (ok).", self.labels)
        redeliveries = CounterMetricFamily(
            "jobq_redeliveries", "Deliveries of a job delivered before (attempt > 1: after a "
            "retry, an expired lease or a lost connection).", labels=LABELS)
        redeliveries.add_metric(list(self.labels), self.redeliveries)
        yield redeliveries
