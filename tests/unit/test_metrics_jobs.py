"""The cheap per-job series expose exactly what prometheus_client's Counter and Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from jobq.observability.metrics import DURATION_BUCKETS, LATENCY_BUCKETS
from jobq.observability.metrics_jobs import JobCounts

VALUES = ("postgres", "q")
SAMPLES = [0.0, 0.0005, 0.0007, 0.001, 0.02, 0.5, 2.5, 7.0, 299.0, 301.0, 5000.0]


def _lines(registry: CollectorRegistry) -> set[str]:
    text = generate_latest(registry).decode()
    return {line for line in text.splitlines() if line and "_created" not in line}


def test_job_counts_match_the_client_library_series_for_series() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counts = JobCounts(VALUES, ["ok", "retried", "dead"], DURATION_BUCKETS, LATENCY_BUCKETS)
    ours.register(counts)
    labels = ("transport", "queue")
    jobs = Counter("jobq_jobs", "Jobs settled, by outcome.", (*labels, "outcome"), registry=theirs)
    errors = Counter("jobq_job_errors", "Failed attempts, by exception type.", (*labels, "error"),
                     registry=theirs)
    duration = Histogram("jobq_job_duration_seconds", "Handler run time.", labels,
                         buckets=DURATION_BUCKETS, registry=theirs).labels(*VALUES)
    latency = Histogram("jobq_job_latency_seconds",
                        "End to end: enqueued until settled as done (ok).", labels,
                        buckets=LATENCY_BUCKETS, registry=theirs).labels(*VALUES)
    redeliveries = Counter("jobq_redeliveries", "Deliveries of a job delivered before (attempt > 1: "
                           "after a retry, an expired lease or a lost connection).", labels,
                           registry=theirs).labels(*VALUES)
    for outcome in ("ok", "retried", "dead"):
        jobs.labels(*VALUES, outcome)
    for i, value in enumerate(SAMPLES):
        outcome = ("ok", "retried", "dead")[i % 3]
        counts.outcomes[outcome] += 1
        jobs.labels(*VALUES, outcome).inc()
        counts.duration.observe(value)
        duration.observe(value)
        counts.latency.observe(value * 3)
        latency.observe(value * 3)
        if i % 4 == 0:
            counts.error("Retry")
            errors.labels(*VALUES, "Retry").inc()
            counts.redeliveries += 1
            redeliveries.inc()
    assert _lines(ours) == _lines(theirs)
