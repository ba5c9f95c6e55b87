"""What a good value is, key by key: the checks beyond the type, and the values read, not just checked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobq.core.durations import parse_duration
from jobq.core.limits import NAME_RE

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

_NULLS = ("", "~", "null", "Null", "NULL")  # YAML's spellings of null, as text from ${VAR} or env


def _optional_duration(value: Any) -> float | None:
    """None (kept for ever) for a null, else the seconds of a duration (ValueError if bad)."""
    if value is None or (isinstance(value, str) and value.strip() in _NULLS):
        return None
    return parse_duration(value)


def queue_shares(value: Any) -> Any:
    """``consumer.queues`` given as text (``--queues``, ``JOBQ_CONSUMER__QUEUES``):
    ``mail=4,default=8`` as {queue: concurrency}; a mapping stays as it is (ValueError: why not)."""
    if not isinstance(value, str):
        return value
    shares: dict[str, int] = {}
    for item in value.split(","):
        name, equals, count = item.strip().partition("=")
        if not equals or not name or not count.strip().isdigit():
            raise ValueError(f"{item.strip()!r}: want QUEUE=N, e.g. mail=4")
        if name in shares:
            raise ValueError(f"queue {name!r} is named twice")
        shares[name] = int(count)
    return shares


# Values that are read, not just checked: key -> converter (ValueError: its message is the
# problem), applied before the type check.
CONVERT: dict[str, Any] = {
    "postgres.retention": lambda v: {} if v is None else v,  # `retention:` left empty
    "postgres.retention.done": lambda v: _optional_duration(v),
    "postgres.retention.dead": lambda v: _optional_duration(v),
    "postgres.retention.interval": parse_duration,
    "consumer.queues": queue_shares,
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



# Values that hold a password or a token: never shown in an error, never parsed from the
# environment as anything but text.
SECRETS = frozenset({"postgres.dsn", "rabbitmq.url", "rabbitmq.urls", "dashboard.token",
                     "dashboard.rabbitmq_api"})
LISTS = frozenset({"rabbitmq.urls"})  # secrets given as a YAML list: parsed, still never shown

# Checks beyond the type: key -> (predicate, what a good value is).
RULES: dict[str, tuple[Any, str]] = {
    "queue": (NAME_RE.match, "letters, digits, '_', '.', '-' (1-100 chars)"),
    "consumer.concurrency": (lambda v: 1 <= v <= 10_000, "between 1 and 10000"),
    "consumer.queues": (lambda v: all(isinstance(k, str) and NAME_RE.match(k) and type(n) is int
                                      and 1 <= n <= 10_000 for k, n in v.items()),
                        "queue name -> its concurrency, e.g. {mail: 4, default: 8} (names of "
                        "letters, digits, '_', '.', '-'; concurrency between 1 and 10000)"),
    "consumer.buffer": (lambda v: v >= -1, ">= 0, or -1 for 'same as concurrency'"),
    "consumer.job_timeout": (lambda v: v > 0, "> 0"),
    "consumer.shutdown_timeout": (lambda v: v >= 0, ">= 0"),
    "consumer.stall_timeout": (lambda v: v >= 0, ">= 0 (0: job_timeout + 60 s)"),
    "consumer.max_jobs_per_process": (lambda v: v >= 0, ">= 0 (0: no limit)"),
    "consumer.max_memory_mb": (lambda v: v >= 0, ">= 0 (0: no limit)"),
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
    "dashboard.rabbitmq_api": (lambda v: v == "" or v.startswith(("http://", "https://")),
                               "an http(s):// URL (empty: derived from rabbitmq.url)"),
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
