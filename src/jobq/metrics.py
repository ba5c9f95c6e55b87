"""Prometheus metrics (own registry, no globals) and the /metrics, /healthz, /readyz endpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from jobq.job import Outcome

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                    10, 30, 60, 300)


class Metrics:
    """The pool's observer: counters by outcome and error, duration, in-flight and buffer."""

    def __init__(self, transport: str, queue: str) -> None:
        self.registry = CollectorRegistry()
        labels = ("transport", "queue")
        values = (transport, queue)
        jobs = Counter("jobq_jobs", "Jobs settled, by outcome.", (*labels, "outcome"),
                       registry=self.registry)
        self._by_outcome = {o: jobs.labels(*values, o.value) for o in Outcome}
        self._errors = Counter("jobq_job_errors", "Failed attempts, by exception type.",
                               (*labels, "error"), registry=self.registry)
        self._values = values
        self._duration = Histogram("jobq_job_duration_seconds", "Handler run time.", labels,
                                   buckets=DURATION_BUCKETS, registry=self.registry
                                   ).labels(*values)
        self._in_flight = Gauge("jobq_in_flight", "Jobs received and not yet settled.", labels,
                                registry=self.registry).labels(*values)
        self._buffered = Gauge("jobq_buffered", "Jobs received and waiting for a worker.", labels,
                               registry=self.registry).labels(*values)
        self.ready = False

    def settled(self, outcome: Outcome, duration: float, error: BaseException | None) -> None:
        """Count one settled job."""
        self._by_outcome[outcome].inc()
        self._duration.observe(duration)
        if error is not None:
            self._errors.labels(*self._values, type(error).__name__).inc()

    def gauges(self, in_flight: int, buffered: int) -> None:
        """Record the pool's occupancy."""
        self._in_flight.set(in_flight)
        self._buffered.set(buffered)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


Start = Callable[[str, list[tuple[str, str]]], object]


def serve(metrics: Metrics, host: str, port: int) -> WSGIServer:
    """Serve /metrics, /healthz and /readyz from a daemon thread; return the server to stop."""
    prometheus = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, object], start: Start) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == "/healthz":
            start("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            ok = metrics.ready
            start("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ready\n" if ok else b"not ready\n"]
        body: Iterable[bytes] = prometheus(environ, start)
        return body

    server = make_server(host, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="jobq-metrics", daemon=True).start()
    return server
