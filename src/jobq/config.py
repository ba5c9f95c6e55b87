"""Configuration as data: YAML files into frozen dataclasses, validated once, errors naming the key.

Precedence, lowest first: dataclass defaults, the YAML file (and the files it ``extends``),
``JOBQ_<SECTION>__<KEY>`` environment variables, command-line flags.
Inside YAML, ``${VAR:default}`` is replaced from the environment.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints
from urllib.parse import quote, urlsplit, urlunsplit

import yaml

from jobq.durations import parse_duration
from jobq.errors import ConfigError
from jobq.limits import NAME_RE as NAME_RE
from jobq.limits import LimitsConfig as LimitsConfig
from jobq.schedules import parse_schedules

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
PASSWORD_RE = re.compile(r"(password\s*=\s*)\S+")  # a key-value DSN's, or one quoted in an error


def mask_passwords(text: str) -> str:
    """``text`` with the value of every ``password=...`` replaced by ``***``."""
    return PASSWORD_RE.sub(r"\1***", text)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return mask_passwords(url)
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


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

    transport: Literal["postgres", "rabbitmq"] = "postgres"
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
    # name -> {cron | every, kind, payload, timezone, queue, max_attempts}: see jobq.schedules
    schedules: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="<defaults>", metadata={"internal": True})


# Values that hold a password or a token: never shown in an error, never parsed from the
# environment as anything but text.
SECRETS = frozenset({"postgres.dsn", "rabbitmq.url", "rabbitmq.urls", "dashboard.token"})
LISTS = frozenset({"rabbitmq.urls"})  # secrets given as a YAML list: parsed, still never shown

# Checks beyond the type: key -> (predicate, what a good value is).
_RULES: dict[str, tuple[Any, str]] = {
    "queue": (NAME_RE.match, "letters, digits, '_', '.', '-' (1-100 chars)"),
    "consumer.concurrency": (lambda v: 1 <= v <= 10_000, "between 1 and 10000"),
    "consumer.buffer": (lambda v: v >= -1, ">= 0, or -1 for 'same as concurrency'"),
    "consumer.job_timeout": (lambda v: v > 0, "> 0"),
    "consumer.shutdown_timeout": (lambda v: v >= 0, ">= 0"),
    "consumer.stall_timeout": (lambda v: v >= 0, ">= 0 (0: job_timeout + 60 s)"),
    "retry.max_attempts": (lambda v: v >= 1, ">= 1"),
    "retry.base_delay": (lambda v: v >= 0, ">= 0"),
    "retry.max_delay": (lambda v: v >= 0, ">= 0"),
    "connect.attempts": (lambda v: v >= 1, ">= 1"),
    "consumer.processors": (lambda v: all(_processor_entry(k, x) for k, x in v.items()),
                            "a mapping of kind to 'module:function' or {processor, args}"),
    "limits.max_payload": (lambda v: v >= 1, ">= 1 (bytes)"),
    "limits.max_headers": (lambda v: v >= 1, ">= 1 (bytes)"),
    "limits.max_pending": (lambda v: v >= 0, ">= 0 (0: no limit)"),
    "limits.enqueue_timeout": (lambda v: v >= 0, ">= 0"),
    "postgres.schema": (IDENT_RE.match, "a plain identifier: letter or '_', then letters, digits, '_'"),
    "postgres.dsn": (lambda v: v.startswith(("postgres://", "postgresql://")) or "=" in v,
                     "a postgresql:// URL or a key=value DSN"),
    "postgres.lease": (lambda v: v > 0, "> 0"),
    "postgres.poll_interval": (lambda v: v > 0, "> 0"),
    "postgres.ack_batch": (lambda v: v >= 1, ">= 1"),
    "postgres.network_timeout": (lambda v: v >= 0, ">= 0 (0: 10 s, at most half the lease)"),
    "postgres.retention.batch": (lambda v: 1 <= v <= 100_000, "between 1 and 100000 (rows)"),
    "rabbitmq.url": (lambda v: v.startswith(("amqp://", "amqps://")), "an amqp:// or amqps:// URL"),
    "rabbitmq.urls": (lambda v: all(isinstance(u, str) and u.startswith(("amqp://", "amqps://"))
                                    for u in v), "a list of amqp:// or amqps:// URLs"),
    "rabbitmq.publish_timeout": (lambda v: v > 0, "> 0 (seconds)"),
    "rabbitmq.heartbeat": (lambda v: 0 <= v < 65535, "0 (aiormq's 60 s) to 65534 (seconds)"),
    "rabbitmq.exchange": (NAME_RE.match, "letters, digits, '_', '.', '-'"),
    "rabbitmq.ca_file": (lambda v: v == "" or Path(v).is_file(), "an existing CA file (PEM), or ''"),
    "rabbitmq.retry_tiers": (lambda v: len(v) > 0 and all(x > 0 for x in v), "non-empty, all > 0"),
    "rabbitmq.prefetch": (lambda v: 0 <= v <= 65535, "between 0 (concurrency + buffer) and 65535"),
    "rabbitmq.default_kind": (lambda v: len(v) <= 200 and "\x00" not in v,
                              "a kind: at most 200 characters, no NUL (empty: plain messages are malformed)"),
    "rabbitmq.delivery_limit": (lambda v: v >= 0, ">= 0 (0: no limit)"),
    "rabbitmq.max_priority": (lambda v: 0 <= v <= 9, "from 0 (no priorities) to 9"),
    "rabbitmq.ack_interval": (lambda v: v > 0, "> 0"),
    "rabbitmq.consumer_timeout": (lambda v: v >= 0, ">= 0 (seconds; 0: the broker has none)"),
    "metrics.port": (lambda v: 0 <= v <= 65535, "a TCP port"),
    "metrics.depth_interval": (lambda v: v > 0, "> 0"),
    "dashboard.port": (lambda v: 0 <= v <= 65535, "a TCP port"),
    "dashboard.sample_interval": (lambda v: v > 0, "> 0"),
    "dashboard.metrics": (lambda v: all(isinstance(u, str) and u.startswith(("http://", "https://"))
                                        for u in v), "a list of http(s):// URLs"),
    "metrics.kinds": (lambda v: len(v) <= 100 and all(isinstance(k, str) and k and k != "other"
                                                      and len(k) <= 200 for k in v),
                      "at most 100 kinds, each a non-empty text of at most 200 characters "
                      "other than 'other'"),
    "log.summary_interval": (lambda v: v >= 0, ">= 0 (0: no summary lines)"),
}


_NULLS = ("", "~", "null", "Null", "NULL")  # YAML's spellings of null, as text from ${VAR} or env


def _optional_duration(value: Any) -> float | None:
    """None (kept for ever) for a null, else the seconds of a duration (ValueError if bad)."""
    if value is None or (isinstance(value, str) and value.strip() in _NULLS):
        return None
    return parse_duration(value)


# Values that are read, not just checked: key -> converter (ValueError: its message is the
# problem), applied before the type check.
_CONVERT: dict[str, Any] = {
    "postgres.retention": lambda v: {} if v is None else v,  # `retention:` left empty
    "postgres.retention.done": lambda v: _optional_duration(v),
    "postgres.retention.dead": lambda v: _optional_duration(v),
    "postgres.retention.interval": parse_duration,
}


def _processor_entry(kind: Any, entry: Any) -> bool:
    """One ``consumer.processors`` item: a non-empty kind and a spec or {processor, args}."""
    if not isinstance(kind, str) or not kind:
        return False
    if isinstance(entry, str):
        return bool(entry)
    return (isinstance(entry, Mapping) and set(entry) <= {"processor", "args"}
            and isinstance(entry.get("processor"), str) and bool(entry["processor"])
            and isinstance(entry.get("args", {}), Mapping))


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widened to float)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=key, source=source)
        return _build(tp, value, key + ".", source)
    if origin is Literal:
        if value not in get_args(tp):
            choices = ", ".join(repr(c) for c in get_args(tp))
            raise ConfigError(f"must be one of {choices}, got {value!r}", key=key, source=source)
        return value
    if origin in (Union, types.UnionType):
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"expected a list, got {type(value).__name__}", key=key, source=source)
        (item,) = get_args(tp)
        return [_coerce(v, item, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=key, source=source)
        return dict(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (tp in (int, float) and isinstance(value, bool)) or not isinstance(value, tp):
        shown = "***" if key in SECRETS else repr(value)
        raise ConfigError(
            f"expected {_type_name(tp)}, got {type(value).__name__} {shown}", key=key, source=source
        )
    return value


def _build(cls: Any, data: Mapping[str, Any], prefix: str, source: str) -> Any:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key (known here: {known})", key=key, source=source)
        convert = _CONVERT.get(key)
        if convert is not None:
            try:
                value = convert(value)
            except ValueError as exc:
                raise ConfigError(str(exc), key=key, source=source) from None
        value = _coerce(value, hints[name], key, source)
        rule = _RULES.get(key)
        if rule is not None and not rule[0](value):
            shown = "***" if key in SECRETS else repr(value)
            raise ConfigError(f"bad value {shown}: must be {rule[1]}", key=key, source=source)
        kwargs[name] = value
    return cls(**kwargs)


def _interpolate(value: Any, env: Mapping[str, str], key: str, source: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, env, f"{key}.{k}" if key else str(k), source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, key, source) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = ENV_RE.fullmatch(value)
    result = interpolate(value, env, key=key, source=source)
    # A value that is one ${...} takes the type its text spells: ${N:8} is an int.
    return parse_scalar(result) if whole else result


def interpolate(text: str, env: Mapping[str, str], *, key: str = "", source: str = "",
                shell_defaults: bool = False) -> str:
    """``text`` with each ``${VAR}`` and ``${VAR:default}`` replaced from ``env``.

    With ``shell_defaults`` (the compose file's syntax, for tools/stack), ``${VAR:-default}``
    means what it means to a shell: the default replaces an empty value too. Without it the
    ``-`` is part of the default, as it always was in jobq's YAML (``${N:-1}`` is -1).
    """

    def lookup(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if shell_defaults and default is not None and default.startswith("-"):
            return env.get(name) or default[1:]
        if name in env:
            return env[name]
        if default is None:
            raise ConfigError(f"environment variable {name} is not set and has no default",
                              key=key, source=source)
        return default

    return ENV_RE.sub(lookup, text)


def parse_scalar(text: str) -> Any:
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return parsed if isinstance(parsed, str | int | float | bool | list) else text


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path, env: Mapping[str, str], seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    source = str(path)
    if path.resolve() in seen:
        raise ConfigError("'extends' loops back to this file", key="extends", source=source)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", source=source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {str(exc).splitlines()[0]}", source=source) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping", source=source)
    data: dict[str, Any] = _interpolate(raw, env, "", source)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError("expected a file name", key="extends", source=source)
    base = _read_yaml(path.parent / parent, env, (*seen, path.resolve()))
    return _merge(base, data)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError("cannot set a key under a non-mapping", key=dotted)
    node[last] = value


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """``JOBQ_CONSUMER__CONCURRENCY=8`` -> ``{"consumer.concurrency": 8}``.

    Only names with a ``__`` section separator (and ``JOBQ_TRANSPORT``) are overrides; other
    ``JOBQ_*`` variables are left for ``${VAR}`` interpolation in the YAML files.
    """
    out: dict[str, Any] = {}
    for name, text in env.items():
        if name.startswith("JOBQ_") and ("__" in name or name == "JOBQ_TRANSPORT"):
            key = name[5:].lower().replace("__", ".")
            # A secret stays the text it is: a token of digits is no number, and is never shown.
            out[key] = text if key in SECRETS and key not in LISTS else parse_scalar(text)
    return out


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Load, merge and validate the configuration; raise ConfigError naming the bad key."""
    env = os.environ if env is None else env
    path = path or env.get("JOBQ_CONFIG")
    source = str(path) if path else "<defaults>"
    data: dict[str, Any] = _read_yaml(Path(path), env) if path else {}
    layers = ((_env_overrides(env), "environment"), (dict(overrides or {}), "command line"))
    for layer, layer_source in layers:
        for dotted, value in layer.items():
            if value is not None:
                try:
                    _set_dotted(data, dotted, value)
                except ConfigError as exc:
                    raise ConfigError(str(exc), source=layer_source) from exc
    settings: Settings = _build(Settings, data, "", source)
    parse_schedules(settings.schedules, source)
    pg = settings.postgres
    if pg.network_timeout and pg.network_timeout >= pg.lease:
        raise ConfigError(f"must be shorter than postgres.lease ({pg.lease:g}s), got "
                          f"{pg.network_timeout:g}: a heartbeat that waits longer than the lease "
                          "lets every job's lease expire", key="postgres.network_timeout",
                          source=source)
    if settings.rabbitmq.max_priority and settings.rabbitmq.queue_type != "classic":
        raise ConfigError("priorities need a classic work queue (rabbitmq.queue_type: classic): "
                          "quorum queues have no x-max-priority on RabbitMQ 3.10; or keep "
                          "prioritised jobs on PostgreSQL", key="rabbitmq.max_priority",
                          source=source)
    if settings.rabbitmq.ca_file and not all(u.startswith("amqps://")
                                             for u in settings.rabbitmq.urls or [settings.rabbitmq.url]):
        raise ConfigError("a CA file is only used with TLS: the url must be amqps://",
                          key="rabbitmq.ca_file", source=source)
    return dataclasses.replace(settings, source=source)
