"""What watches a consumer, as the composition root builds it: the tracing and metrics that
observe its pool, the /metrics server, the monitor (depth gauge, summary lines)."""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from jobq.config import Settings
from jobq.core.port import Admin, Transport
from jobq.observability.metrics import Metrics, serve, stop_serving
from jobq.observability.monitor import Monitor
from jobq.observability.scraping import Scrape
from jobq.wiring.derived import loop_stale_after
from jobq.worker.middleware import Middleware, observer_of
from jobq.worker.pool import WorkerPool
from jobq.worker.stats import PoolObserver


def job_tracing(settings: Settings) -> Middleware | None:
    """The consumer's tracing (tracing.enabled), middleware; None when off, and then
    OpenTelemetry is not even imported."""
    if not settings.tracing.enabled:
        return None
    from jobq.observability.tracing import JobTracing

    return JobTracing(system=settings.transport, queue=settings.queue)


def observer(metrics: Metrics, tracing: Middleware | None,
             middleware: list[Middleware]) -> PoolObserver:
    """What observes the pool: the ``settled`` of an app's middleware (its failure hooks
    first), then the tracing's, then the metrics (alone when there is nothing else)."""
    return observer_of([*middleware, *([tracing] if tracing is not None else [])], metrics)


def metrics_server(settings: Settings, scrape: Scrape) -> Iterator[WSGIServer | None]:
    """The /metrics, /healthz and /readyz server when ``metrics.enabled`` (else None), showing
    ``scrape`` (this queue's metrics, and those of the process's other queues), started when
    first asked for and stopped at shutdown, a failed start-up's included."""
    if not settings.metrics.enabled:
        yield None
        return
    server = serve(scrape, settings.metrics.host, settings.metrics.port)
    try:
        yield server
    finally:
        stop_serving(server)


def monitor(settings: Settings, pool: WorkerPool, transport: Transport, metrics: Metrics,
            admin: Admin) -> Monitor:
    """The consumer's monitor (the depth gauge, the summary lines), the metrics watching
    ``pool`` and ``transport``; the queue's depth is read only if a gauge or a summary shows it."""
    metrics.watch(pool, transport)
    metrics.stale_after = loop_stale_after(settings)
    served = settings.metrics.enabled
    wanted = served or settings.log.summary_interval > 0
    return Monitor(pool, metrics=metrics if served else None,
                   probe=admin.depth if wanted else None,
                   depth_interval=settings.metrics.depth_interval,
                   summary_interval=settings.log.summary_interval)
