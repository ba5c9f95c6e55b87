"""The settings as frozen dataclasses, one per section of the YAML, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from jobq.config.redaction import redact
from jobq.core.backoff import Backoff
from jobq.core.limits import LimitsConfig as LimitsConfig


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    """Backoff and attempt limits applied to failed jobs."""

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: bool = True


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig:
    """The worker pool and the processor it runs."""

    concurrency: int = 32
    buffer: int = -1  # -1: as large as concurrency (grown for short jobs in lease mode: sizing.py)
    job_timeout: float = 300.0
    shutdown_timeout: float = 30.0
    # /healthz fails when jobs are held and none started or settled for this long; 0: job_timeout + 60
    stall_timeout: float = 0.0
    once: bool = False
    # The default for kinds not in ``processors``; "" for none. A consumer needs one of the two
    # (no default on purpose: a consumer started by mistake would settle every job unrun).
    processor: str = ""
    processor_args: dict[str, Any] = field(default_factory=dict)
    # kind -> "module:function" (or {processor: ..., args: {...}}); unknown kinds go to
    # ``processor``, or are dead-lettered naming the kind when it is "".
    processors: dict[str, Any] = field(default_factory=dict)
    # "module:attribute" of a jobq.App (consumer -A): each job runs as the task of its kind.
    # Instead of processor and processors, not beside them.
    app: str = ""
    # queue -> its concurrency (its share of the process): one consumer serving several
    # queues, a pool each (consume.py); empty: ``queue`` alone, with ``concurrency``.
    queues: dict[str, int] = field(default_factory=dict)
    # Recycling: end the process gracefully (exit 0, for its supervisor to start a new one)
    # once it has taken this many jobs, or once its resident memory is over this many MB; 0: never.
    max_jobs_per_process: int = 0
    max_memory_mb: float = 0.0

    @property
    def buffer_size(self) -> int:
        """Deliveries held ready beyond the running ones."""
        return self.concurrency if self.buffer < 0 else self.buffer


@dataclass(frozen=True, kw_only=True)
class ConnectConfig:
    """Retries for a server that cannot be reached, at start and after a connection drops."""

    attempts: int = 10
    backoff_base: float = 0.5
    backoff_max: float = 10.0
    timeout: float = 5.0

    def backoff(self) -> Backoff:
        """The backoff between connection attempts (``backoff_base`` doubling up to ``backoff_max``)."""
        return Backoff(base=self.backoff_base, cap=self.backoff_max)


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """How long done and dead jobs stay in the table, in seconds (None: for ever).

    Carried out by the running consumers, one at a time per queue (transports/postgres/retention.py),
    and by ``jobq prune``. The default keeps every row, as before the setting existed.
    """

    done: float | None = None
    dead: float | None = None
    interval: float = 60.0  # seconds between a consumer's prune rounds
    batch: int = 1000  # rows per DELETE statement at most (each its own short transaction)

    @property
    def enabled(self) -> bool:
        """True when a consumer has anything to prune."""
        return self.done is not None or self.dead is not None

    def of(self, state: str) -> float | None:
        """The retention of ``state`` ("done" or "dead"), None when kept for ever."""
        value: float | None = self.done if state == "done" else self.dead
        return value


@dataclass(frozen=True, kw_only=True)
class PostgresConfig:
    """The PostgreSQL transport."""

    dsn: str = field(default="postgresql://postgres@127.0.0.1:5432/test", repr=False)
    schema: str = "jobq"
    claim: Literal["lease", "transaction"] = "lease"
    # A dead consumer's jobs are free one lease after its last heartbeat and handed out again
    # by the next rescue: within lease + rescue_interval = 15 s (docs/architecture.md, Leases).
    lease: float = 12.0
    heartbeat: float = 0.0  # 0: a third of the lease
    notify: bool = True
    poll_interval: float = 1.0
    rescue_interval: float = 3.0
    pool_size: int = 0  # 0: derived from the claim mode and concurrency
    ack_batch: int = 1000
    ack_interval: float = 0.02
    # Lease mode: a claim and an ack commit without waiting for the WAL flush. A server crash
    # can then undo the last moment's claims and acks: those jobs run again (never lost, as
    # at-least-once allows). false: they wait for the flush, as the server's synchronous_commit
    # says (docs/benchmark.md measures what it costs).
    async_commit: bool = True
    # Seconds a PostgreSQL link may stay silent: every jobq statement's deadline, and (both
    # ends) the TCP keepalives and tcp_user_timeout. 0: min(10, lease / 2).
    network_timeout: float = 0.0
    # Transaction mode: a pick also picks for the workers about to free up, kept for them up to
    # 0.5 s and then handed back; other consumers pass those jobs over meanwhile
    # (docs/claim-modes.md, "Picking ahead").
    pick_ahead: bool = True
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    @property
    def network_deadline(self) -> float:
        """``network_timeout``, or when 0 the derived value: 10 s, at most half the lease."""
        return self.network_timeout or min(10.0, self.lease / 2)

    @property
    def safe_dsn(self) -> str:
        """The DSN with its password hidden."""
        return redact(self.dsn)


@dataclass(frozen=True, kw_only=True)
class RabbitConfig:
    """The RabbitMQ transport."""

    url: str = field(default="amqp://guest:guest@127.0.0.1:5672/", repr=False)
    # A cluster's nodes, tried in turn at each connect and reconnect (the first that answers
    # is used); empty: `url` alone. Give each node's user and password as in `url`.
    urls: list[str] = field(default_factory=list, repr=False)
    exchange: str = "jobq"
    queue_type: Literal["quorum", "classic"] = "quorum"
    # <q>.dead: classic, so no delivery limit applies to it on any broker version (RabbitMQ 4.x
    # gives quorum queues a default limit of 20 that counts every listing's return). "quorum"
    # keeps a dead queue an older jobq declared so (docs/rabbitmq-versions.md says what to do).
    dead_queue_type: Literal["classic", "quorum"] = "classic"
    prefetch: int = 0  # 0: concurrency + buffer
    # Opt-in for plain messages from producers that know nothing of jobq: the kind of a message
    # with no `type` (and one with no `message_id` gets an id). Empty: both are malformed.
    default_kind: str = ""
    retry_tiers: list[float] = field(
        default_factory=lambda: [1.0, 5.0, 30.0, 300.0, 3600.0, 86400.0])
    # Quorum queues only: redeliveries of one message (crashes, lost connections) after which
    # the broker dead-letters it by itself, the last guard behind jobq's own attempt count.
    # Fixed per queue, not derived from retry.max_attempts, which jobs may each override.
    delivery_limit: int = 20  # 0: no limit
    # NewJob.priority on RabbitMQ: the work queue's x-max-priority, classic queues only (quorum
    # queues on 3.10 have none). 0: no priorities, and a job with one is refused at enqueue.
    max_priority: int = 0
    ack_interval: float = 0.01
    # Every basic.publish (the producer's, the consumer's copies) waits this long for its
    # confirm, then fails: a broker that blocks publishing (a resource alarm) or a dark link.
    publish_timeout: float = 10.0
    # Set it to your broker's consumer_timeout, in seconds (RabbitMQ's default: 30 minutes; 0:
    # the broker has none). Not visible over AMQP; the consumer checks its settings against it.
    consumer_timeout: float = 1800.0
    # AMQP heartbeat in seconds, asked for on every connection unless the url sets its own
    # ``heartbeat``: a silent link (a partition) is noticed in about 3 x (heartbeat + 1) s.
    # 0: not asked for (aiormq's default, 60 s: about 3 minutes to notice).
    heartbeat: int = 10
    ca_file: str = ""  # CA bundle (PEM) for an amqps:// url; passed as the url's cafile

    @property
    def connect_url(self) -> str:
        """The URL to connect with: ``ca_file`` added as the ``cafile`` query parameter."""
        return self.connect_urls[0]

    @property
    def connect_urls(self) -> list[str]:
        """Every node's URL to connect with (``urls``, else ``url``), ``ca_file`` added."""
        return [self._with_ca(url) for url in (self.urls or [self.url])]

    def _with_ca(self, url: str) -> str:
        if not self.ca_file or "cafile=" in url:
            return url
        return f"{url}{'&' if '?' in url else '?'}cafile={quote(self.ca_file)}"

    @property
    def safe_url(self) -> str:
        """The URL with its password hidden."""
        return redact(self.url)


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    """The Prometheus /metrics, /healthz and /readyz endpoint."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9100
    depth_interval: float = 5.0  # seconds between queue-depth polls (jobq_queue_depth)
    # Job kinds with series of their own in the per-kind metrics (jobq_kind_*); every other
    # kind counts as "other", so the label stays bounded. Empty: consumer.processors' kinds.
    kinds: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    """``jobq dashboard``: where it listens, and the token its actions need."""

    host: str = "127.0.0.1"
    port: int = 9820
    # Every action (pause, cancel, requeue, ...) needs it; empty: the dashboard is read-only.
    # Give it through JOBQ_DASHBOARD__TOKEN rather than in a file.
    token: str = field(default="", repr=False)
    read_only: bool = False
    # Host names the pages answer to (a Host header naming another is refused: DNS rebinding);
    # the listen address is added. Put your proxy's public name here.
    allowed_hosts: list[str] = field(default_factory=lambda: ["127.0.0.1", "localhost", "::1"])
    # The consumers' /metrics URLs: the throughput chart (jobq_jobs_total, outcome ok, by
    # transport and queue). Empty: the chart shows the waiting jobs only.
    metrics: list[str] = field(default_factory=list)
    sample_interval: float = 5.0  # seconds between the chart's samples
    # RabbitMQ's management API, where the dashboard lists the broker's jobq queues (AMQP
    # cannot list queues). Empty: http://<rabbitmq.url's host>:15672/ as rabbitmq.url's user.
    rabbitmq_api: str = field(default="", repr=False)


@dataclass(frozen=True, kw_only=True)
class TracingConfig:
    """OpenTelemetry traces (the ``otel`` extra): off unless asked for, and then free of cost
    only in that nothing else changes. The application configures the SDK and exporter."""

    enabled: bool = False


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """Log level and format."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"
    summary_interval: float = 30.0  # seconds between consumer summary lines at info; 0: none


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a jobq process needs, validated."""

    # "memory": jobs kept inside one Python process, for tests (jobq.testing); no command runs on it
    transport: Literal["postgres", "rabbitmq", "memory"] = "postgres"
    queue: str = "default"
    # uvloop: ~10% less CPU per job than the stock loop (measured on the RabbitMQ consumer).
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    connect: ConnectConfig = field(default_factory=ConnectConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    postgres: PostgresConfig = field(default_factory=PostgresConfig)
    rabbitmq: RabbitConfig = field(default_factory=RabbitConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    log: LogConfig = field(default_factory=LogConfig)
    # name -> {cron | every, kind, payload, timezone, queue, max_attempts}: see jobq.feeds.schedules
    schedules: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="<defaults>", metadata={"internal": True})
