"""Metrics as the pool's observer, pulled gauges, readiness and the HTTP endpoint (no server)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobq import Job, PermanentError, Retry
from jobq.core.errors import ConnectionLost
from jobq.core.job import ACK, Dead, Delivery
from jobq.core.port import Depth, Health
from jobq.observability.metrics import Metrics, serve
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until
from tests.scrape import get, parse, value

LABELS = {"transport": "memory", "queue": "q"}


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    """One sample straight from the registry."""
    return metrics.registry.get_sample_value(name, {**LABELS, **labels})


def make_pool(transport: MemoryTransport, handler: Any, metrics: Metrics, **kw: Any) -> WorkerPool:
    opts: dict[str, Any] = {"concurrency": 4, "buffer_size": 4, "job_timeout": 5.0,
                            "shutdown_timeout": 5.0, "poll_timeout": 0.05, "once": True}
    opts.update(kw)
    return WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False), observer=metrics,
                      **opts)


async def test_counters_follow_the_pool_outcomes() -> None:
    store = MemoryStore()
    for kind, n in (("ok", 6), ("flaky", 3), ("bad", 2)):
        for _ in range(n):
            store.add(kind, {}, max_attempts=3)
    store.add("ok", "not a mapping")  # malformed: dead-lettered unrun
    metrics = Metrics("memory", "q")

    async def handler(job: Job) -> None:
        if job.kind == "flaky" and job.attempt == 1:
            raise Retry(delay=0.0, reason="first attempt fails")
        if job.kind == "bad":
            raise PermanentError("never")

    stats = await make_pool(MemoryTransport(store, queue="q"), handler, metrics).run()

    assert (stats.ok, stats.retried, stats.dead) == (9, 3, 3)
    assert sample(metrics, "jobq_jobs_total", outcome="ok") == 9
    assert sample(metrics, "jobq_jobs_total", outcome="retried") == 3
    assert sample(metrics, "jobq_jobs_total", outcome="dead") == 3
    assert sample(metrics, "jobq_job_errors_total", error="Retry") == 3
    assert sample(metrics, "jobq_job_errors_total", error="PermanentError") == 2
    assert sample(metrics, "jobq_job_errors_total", error="MalformedJob") == 1
    assert sample(metrics, "jobq_job_duration_seconds_count") == 15
    assert sample(metrics, "jobq_redeliveries_total") == 3  # the flaky jobs' second attempts


def test_latency_is_observed_for_done_jobs_only() -> None:
    metrics = Metrics("memory", "q")
    enqueued = datetime.now(UTC) - timedelta(seconds=2)
    job = Job(id="1", queue="q", kind="k", payload={}, enqueued_at=enqueued)
    metrics.settled(ACK, 0.01, None, job)
    metrics.settled(Dead("x"), 0.01, PermanentError("x"), job)
    metrics.settled(ACK, 0.01, None, Job(id="2", queue="q", kind="k", payload={}))
    assert sample(metrics, "jobq_job_latency_seconds_count") == 1
    latency = sample(metrics, "jobq_job_latency_seconds_sum")
    assert latency is not None and 2.0 <= latency < 3.0
    assert sample(metrics, "jobq_job_latency_seconds_bucket", le="1.0") == 0
    assert sample(metrics, "jobq_job_latency_seconds_bucket", le="2.5") == 1


class Counted(MemoryTransport):
    """A transport that keeps counters the metrics export, and says if connected."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, queue="q")
        self.rescued = 0
        self.reconnects = 0
        self.connected = True

    def health(self) -> Health:
        return Health(self.connected, {"rescued": self.rescued, "reconnects": self.reconnects})


async def test_gauges_and_transport_counters_are_read_at_scrape_time() -> None:
    store = MemoryStore()
    for _ in range(6):
        store.add("k", {})
    transport = Counted(store)
    metrics = Metrics("memory", "q")
    release = asyncio.Event()

    async def handler(job: Job) -> None:
        await release.wait()

    pool = make_pool(transport, handler, metrics, concurrency=2, buffer_size=4, once=False)
    metrics.watch(pool, transport)
    task = asyncio.create_task(pool.run())
    await until(lambda: sample(metrics, "jobq_buffered") == 4, "a full buffer")
    assert sample(metrics, "jobq_in_flight") == 6
    transport.rescued, transport.reconnects = 3, 2
    assert sample(metrics, "jobq_rescued_leases_total") == 3
    assert sample(metrics, "jobq_reconnects_total") == 2
    release.set()
    await until(lambda: sample(metrics, "jobq_in_flight") == 0, "the pool to empty")
    pool.stop()
    await task


def test_transport_counters_are_exported_only_if_the_transport_keeps_them() -> None:
    metrics = Metrics("memory", "q")
    metrics.watch(make_pool(MemoryTransport(MemoryStore()), None, metrics),
                  MemoryTransport(MemoryStore()))
    names = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert "jobq_rescued_leases_total" not in names and "jobq_reconnects_total" not in names


def test_every_counter_a_transport_keeps_is_exported() -> None:
    class Keeping(MemoryTransport):
        def health(self) -> Health:
            return Health(True, {"rescued": 1, "reconnects": 2, "stale": 3, "buried": 4})

    metrics = Metrics("memory", "q")
    transport = Keeping(MemoryStore())
    metrics.watch(make_pool(transport, None, metrics), transport)
    assert sample(metrics, "jobq_stale_settles_total") == 3
    assert sample(metrics, "jobq_buried_total") == 4


class FailingOnce(MemoryTransport):
    """receive() fails with ConnectionLost until ``healed`` is set."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, queue="q")
        self.healed = asyncio.Event()

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        if not self.healed.is_set():
            raise ConnectionLost("server went away")
        return await super().receive(max_count, timeout)


async def test_readiness_follows_receive_failures_stop_and_the_transport() -> None:
    transport = FailingOnce(MemoryStore())
    metrics = Metrics("memory", "q")

    async def handler(job: Job) -> None:
        return None

    pool = make_pool(transport, handler, metrics, once=False)
    metrics.watch(pool, transport)
    assert not metrics.is_ready()  # not started
    metrics.ready = True
    task = asyncio.create_task(pool.run())
    await until(lambda: pool.receive_failures > 0, "a failed receive")
    assert not metrics.is_ready() and sample(metrics, "jobq_ready") == 0
    transport.healed.set()
    await until(metrics.is_ready, "readiness after the transport healed")
    assert sample(metrics, "jobq_ready") == 1
    transport.connected = False
    assert not metrics.is_ready()
    transport.connected = True
    pool.stop()
    assert not metrics.is_ready()  # stopping: no longer consuming
    await task


def test_depth_gauges_take_whatever_states_the_backend_reports() -> None:
    metrics = Metrics("rabbitmq", "q")
    metrics.depth(Depth(depth={"ready": 5, "unacked": 2, "dead": 1, "retry": 3, "done": None},
                        oldest_pending_seconds=None))
    names = {s.labels.get("state") for f in metrics.registry.collect() for s in f.samples
             if s.name == "jobq_queue_depth"}
    assert names == {"ready", "unacked", "dead", "retry"}  # None: not counted, not exported
    got = {s: metrics.registry.get_sample_value("jobq_queue_depth", {
        "transport": "rabbitmq", "queue": "q", "state": s}) for s in ("ready", "unacked", "dead", "retry")}
    assert got == {"ready": 5, "unacked": 2, "dead": 1, "retry": 3}
    assert metrics.registry.get_sample_value("jobq_queue_oldest_pending_seconds",
                                             {"transport": "rabbitmq", "queue": "q"}) == 0


def test_http_endpoints() -> None:
    metrics = Metrics("memory", "q")
    metrics.settled(ACK, 0.002, None, Job(id="1", queue="q", kind="k", payload={}))
    server = serve(metrics, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (503, "not ready\n")
        metrics.ready = True
        assert get(f"{base}/readyz") == (200, "ready\n")
        status, body = get(f"{base}/metrics")
        assert status == 200
        assert value(parse(body), "jobq_jobs_total", outcome="ok", **LABELS) == 1
        assert value(parse(body), "jobq_ready", **LABELS) == 1
        metrics.loop_stalled = lambda: 0.0  # the watchdog's: the loop beats on time
        assert metrics.is_alive() and get(f"{base}/healthz") == (200, "ok\n")
        metrics.loop_stalled = lambda: metrics.stale_after + 0.1  # blocked past the bound
        assert not metrics.is_alive()
        assert get(f"{base}/healthz") == (503, "event loop blocked for over 30s\n")
    finally:
        server.shutdown()
        server.server_close()


async def test_per_kind_series_for_the_named_kinds_and_other_for_the_rest() -> None:
    store = MemoryStore()
    for kind, n in (("email", 4), ("report", 2), ("typo-1", 1), ("typo-2", 1)):
        for _ in range(n):
            store.add(kind, {}, max_attempts=1)
    metrics = Metrics("memory", "q", kinds=["email", "report", "never-seen"])

    async def handler(job: Job) -> None:
        if job.kind == "report":
            raise ValueError("no data")

    await make_pool(MemoryTransport(store, queue="q"), handler, metrics).run()

    assert sample(metrics, "jobq_kind_jobs_total", kind="email", outcome="ok") == 4
    assert sample(metrics, "jobq_kind_jobs_total", kind="report", outcome="dead") == 2
    assert sample(metrics, "jobq_kind_job_errors_total", kind="report", error="ValueError") == 2
    assert sample(metrics, "jobq_kind_jobs_total", kind="other", outcome="ok") == 2  # bounded
    assert sample(metrics, "jobq_kind_job_duration_seconds_count", kind="email") == 4
    kinds = {s.labels.get("kind") for family in metrics.registry.collect()
             for s in family.samples if s.name.startswith("jobq_kind_")}
    assert kinds == {"email", "report", "other"}  # named ones seen, and the rest as one


def test_metrics_kinds_default_to_the_processors_and_are_bounded() -> None:
    from jobq.config import load_settings
    from jobq.core.errors import ConfigError
    from jobq.wiring.derived import metric_kinds

    settings = load_settings(None, {"consumer.processors": {"email": "noop", "report": "noop"}})
    assert metric_kinds(settings) == ["email", "report"]
    named = load_settings(None, {"metrics.kinds": ["a"], "consumer.processors": {"b": "noop"}})
    assert metric_kinds(named) == ["a"]
    with pytest.raises(ConfigError, match=r"metrics\.kinds"):
        load_settings(None, {"metrics.kinds": [f"k{i}" for i in range(101)]})
    with pytest.raises(ConfigError, match=r"metrics\.kinds"):
        load_settings(None, {"metrics.kinds": ["other"]})
