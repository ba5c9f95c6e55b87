"""Prometheus metrics (own registry, no globals) and the /metrics, /healthz, /readyz endpoint.

Every series carries the labels ``transport`` and ``queue``. Per-job values are pushed by the
pool (``settled``); occupancy, readiness and the transport's own counters are pulled at scrape
time (``watch``), so they cost the hot path nothing; queue depth is set by the depth poller
(``jobq.observability.monitor``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from jobq.core.job import Decision, Job, Outcome
from jobq.core.port import Depth, Health
from jobq.observability.metrics_jobs import JobCounts
from jobq.observability.metrics_kinds import KindCounts
from jobq.worker.middleware import Middleware

STOP_TIMEOUT = 2.0  # seconds stop_serving waits for the serving loop to end
CLIENT_TIMEOUT = 10.0  # seconds a metrics client may stay silent in the middle of a request

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                    10, 30, 60, 300)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                   60, 120, 300, 600, 1800, 3600)

# What each key of ``Transport.health().counters`` is exported as; a transport reports the keys it
# keeps (a unit test checks every transport's keys are listed here).
TRANSPORT_COUNTERS = {
    "rescued": ("jobq_rescued_leases", "Expired leases freed by this consumer (their consumer "
                                       "died or stalled)."),
    "reconnects": ("jobq_reconnects", "Connections to the server re-established after a loss."),
    "stale": ("jobq_stale_settles", "Outcomes not written: the delivery was no longer this "
                                    "consumer's (lease expired, connection lost); it runs again."),
    "leases_lost": ("jobq_leases_lost", "Leases a heartbeat found taken from this consumer (it "
                                        "stalled past its lease); their settles are not sent."),
    "acks_not_written": ("jobq_acks_not_written", "Of the stale settles, acks: counted ok by the "
                                                  "pool, not done in the queue (the job runs again)."),
    "buried": ("jobq_buried", "Jobs dead-lettered unrun: every attempt's consumer died before "
                              "settling it."),
    "cancelled_unrun": ("jobq_cancelled_unrun", "Jobs this consumer received with a tombstone "
                                                "(jobq jobs cancel) and settled as cancelled, unrun."),
    "pruned_done": ("jobq_pruned_done_jobs", "Done jobs this consumer deleted past "
                                             "postgres.retention.done."),
    "pruned_dead": ("jobq_pruned_dead_jobs", "Dead jobs this consumer deleted past "
                                             "postgres.retention.dead."),
}


class PoolView(Protocol):
    """What the metrics read from a running pool at scrape time."""

    @property
    def in_flight(self) -> int:
        """Deliveries received and not yet settled."""

    @property
    def buffered(self) -> int:
        """Deliveries waiting for a worker."""

    @property
    def consuming(self) -> bool:
        """Started, not stopping, and the last receive succeeded."""


class TransportView(Protocol):
    """What the metrics read from the transport at scrape time (a part of ``Transport``)."""

    def health(self) -> Health:
        """Connected or not, and event counts by ``TRANSPORT_COUNTERS`` key."""


class _TransportCounters(Collector):
    """Reads the transport's counters when Prometheus scrapes (no per-event cost)."""

    def __init__(self, transport: TransportView, labels: tuple[str, str]) -> None:
        self._transport = transport
        self._labels = labels

    def collect(self) -> Iterator[CounterMetricFamily]:
        """One counter family per counter the transport keeps."""
        for key, count in self._transport.health().counters.items():
            if key not in TRANSPORT_COUNTERS:
                continue
            name, text = TRANSPORT_COUNTERS[key]
            family = CounterMetricFamily(name, text, labels=("transport", "queue"))
            family.add_metric(self._labels, float(count))
            yield family


class Metrics(Middleware):
    """The pool's observer, middleware whose ``settled`` counts (worker/middleware.py): jobs by
    outcome, errors by type, duration, latency; and depth, readiness."""

    def __init__(self, transport: str, queue: str, kinds: Iterable[str] = (),
                 stale_after: float = 30.0) -> None:
        self.registry = r = CollectorRegistry()
        self.stale_after = stale_after  # /healthz fails once the loop is blocked this long
        self.loop_stalled: Callable[[], float] | None = None  # the watchdog's, once it runs
        labels = ("transport", "queue")
        self._values = values = (transport, queue)
        # The per-job series (jobq_jobs, jobq_job_errors, jobq_job_duration_seconds,
        # jobq_job_latency_seconds, jobq_redeliveries): plain numbers, exported on scrape.
        self._jobs = JobCounts(values, [o.value for o in (Outcome.ACK, Outcome.RETRY, Outcome.DEAD,
                                                    Outcome.CANCELLED)],
                               DURATION_BUCKETS, LATENCY_BUCKETS)
        r.register(self._jobs)
        # The same by job kind, the kinds named in metrics.kinds (the rest as "other").
        self._kinds = KindCounts(values, kinds, [o.value for o in (
            Outcome.ACK, Outcome.RETRY, Outcome.DEAD, Outcome.CANCELLED)], DURATION_BUCKETS)
        r.register(self._kinds)
        self._in_flight = Gauge("jobq_in_flight", "Jobs received and not yet settled.", labels,
                                registry=r).labels(*values)
        self._buffered = Gauge("jobq_buffered", "Jobs received and waiting for a worker.", labels,
                               registry=r).labels(*values)
        self._depth = Gauge("jobq_queue_depth", "Jobs in the queue by state, as the server reports "
                            "them (polled).", (*labels, "state"), registry=r)
        self._oldest = Gauge("jobq_queue_oldest_pending_seconds", "Age of the oldest job waiting "
                             "to run (polled; 0 when none).", labels, registry=r).labels(*values)
        self._poll_errors = Counter("jobq_depth_poll_errors", "Depth polls that failed.", labels,
                                    registry=r).labels(*values)
        self._shutdown = Gauge("jobq_shutdown_seconds", "Duration of the last graceful shutdown "
                               "(stop signal to transport closed).", labels, registry=r
                               ).labels(*values)
        Gauge("jobq_ready", "1 while connected and consuming (what /readyz answers).", labels,
              registry=r).labels(*values).set_function(lambda: float(self.is_ready()))
        self.ready = False  # set by the command once the transport is open, cleared at stop
        self._pool: PoolView | None = None
        self._transport: TransportView | None = None

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """Count one settled job (hot path: a few integer additions)."""
        jobs = self._jobs
        outcome = decision.outcome
        jobs.outcomes[outcome.value] += 1
        jobs.duration.observe(duration)
        failed = None if error is None else type(error).__name__
        self._kinds.settled(job.kind, outcome.value, duration, failed)
        if failed is not None:
            jobs.error(failed)
        elif job.enqueued_at is not None:
            jobs.latency.observe(time.time() - job.enqueued_at.timestamp())
        if job.attempt > 1:
            jobs.redeliveries += 1

    @property
    def queue(self) -> str:
        """The queue these metrics are labelled with."""
        return self._values[1]

    def gauges(self, in_flight: int, buffered: int) -> None:
        """Record the pool's occupancy (ignored once ``watch`` reads it at scrape time)."""
        if self._pool is None:
            self._in_flight.set(in_flight)
            self._buffered.set(buffered)

    def watch(self, pool: PoolView, transport: TransportView) -> None:
        """Read occupancy, readiness and the transport's counters from these at scrape time."""
        self._pool = pool
        self._transport = transport
        self._in_flight.set_function(lambda: pool.in_flight)
        self._buffered.set_function(lambda: pool.buffered)
        # A WorkerPool's; a view without it is never paused.
        Gauge("jobq_queue_paused", "1 while this consumer holds back because its queue is paused "
              "(jobq pause; looked at about every second).", ("transport", "queue"),
              registry=self.registry).labels(*self._values).set_function(
            lambda: float(bool(getattr(pool, "paused", False))))
        self.registry.register(_TransportCounters(transport, self._values))
        if hasattr(transport, "blocked"):  # RabbitMQ: connection.blocked by a resource alarm
            Gauge("jobq_broker_blocked", "1 while the broker blocks this consumer's publishing "
                  "connection (a memory or disk alarm).", ("transport", "queue"),
                  registry=self.registry).labels(*self._values).set_function(
                lambda: float(bool(getattr(transport, "blocked", False))))

    def depth(self, data: Depth) -> None:
        """Record an ``admin.depth()`` answer.

        A state whose count is None (the backend cannot tell) is not exported.
        """
        for state, count in data.depth.items():
            if count is not None:
                self._depth.labels(*self._values, state).set(count)
        self._oldest.set(data.oldest_pending_seconds or 0.0)

    def depth_failed(self) -> None:
        """Count a failed depth poll."""
        self._poll_errors.inc()

    def shutdown(self, seconds: float) -> None:
        """Record how long the last graceful shutdown took."""
        self._shutdown.set(seconds)

    def is_alive(self) -> bool:
        """False once the event loop is blocked for ``stale_after`` s (the watchdog's beat)."""
        return self.loop_stalled is None or self.loop_stalled() < self.stale_after

    def unhealthy(self) -> str | None:
        """Why /healthz fails (the event loop stopped beating, or the pool is not live), or None."""
        if not self.is_alive():
            return f"event loop blocked for over {self.stale_after:g}s"
        problem = getattr(self._pool, "problem", None)  # a WorkerPool's; views without it pass
        reason: object = None if problem is None else problem(time.monotonic())
        return None if reason is None else str(reason)

    def is_ready(self) -> bool:
        """Transport open, pool consuming, and the transport connected."""
        if not self.ready:
            return False
        if self._pool is not None and not self._pool.consuming:
            return False
        return self._transport is None or self._transport.health().connected


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT  # a client silent this long mid-request is dropped

    def log_message(self, format: str, *args: object) -> None:
        return None


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per request: one client that never finishes its request (a cut-off probe, a
    scanner) blocked every scrape and /healthz behind it, and ``shutdown`` with them."""

    daemon_threads = True  # a request in progress never holds the process at exit

    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone or silent is its own problem: nothing on stderr."""


Start = Callable[[str, list[tuple[str, str]]], object]


def _plain(start: Start, ok: bool, yes: bytes, no: bytes) -> list[bytes]:
    start("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
    return [yes if ok else no]


class Served(Protocol):
    """What the server shows: one queue's ``Metrics``, or several (``scraping.Scrape``)."""

    @property
    def registry(self) -> CollectorRegistry: ...

    def unhealthy(self) -> str | None: ...

    def is_ready(self) -> bool: ...


def serve(metrics: Served, host: str, port: int) -> WSGIServer:
    """Serve /metrics, /healthz and /readyz from a daemon thread; return the server to stop."""
    prometheus = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, object], start: Start) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == "/healthz":
            problem = metrics.unhealthy()
            return _plain(start, problem is None, b"ok\n", f"{problem}\n".encode())
        if path == "/readyz":
            return _plain(start, metrics.is_ready(), b"ready\n", b"not ready\n")
        body: Iterable[bytes] = prometheus(environ, start)
        return body

    server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="jobq-metrics", daemon=True).start()
    return server


def stop_serving(server: WSGIServer) -> None:
    """Stop the server and close its port: within its poll interval (0.5 s), whatever the
    requests in progress are doing (each has a thread of its own, and is dropped at exit).

    ``shutdown`` waits for the serving loop without a deadline; it gets STOP_TIMEOUT, from a
    thread of its own, and the port is closed either way: a shutdown never waits on it longer.
    """
    stopping = threading.Thread(target=server.shutdown, name="jobq-metrics-stop", daemon=True)
    stopping.start()
    stopping.join(STOP_TIMEOUT)
    if stopping.is_alive():
        logging.getLogger("jobq.metrics").warning(
            "the metrics server did not stop within %.0fs; closing its port anyway", STOP_TIMEOUT)
    server.server_close()
