"""One processor per job kind (``consumer.processors``), the single ``processor`` as the default.

A job whose kind has no processor and no default fails with UnknownKind, a PermanentError:
the pool dead-letters it with a reason naming the kind, and the consumer goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobq.config import ConsumerConfig
from jobq.core.errors import ConfigError, UnknownKind
from jobq.core.job import Job
from jobq.worker.processor import Handler, as_async, load_processor
from jobq.worker.threads import HandlerThreads


class KindRouter:
    """Runs the handler registered for ``job.kind``, else the default, else UnknownKind."""

    def __init__(self, routes: Mapping[str, Handler], default: Handler | None) -> None:
        self._routes = dict(routes)
        self._default = default
        self._known = ", ".join(sorted(routes)[:20])

    async def __call__(self, job: Job) -> None:
        """Dispatch ``job`` by its kind."""
        handler = self._routes.get(job.kind, self._default)
        if handler is None:
            raise UnknownKind(f"no processor for kind {job.kind[:100]!r} (known kinds: {self._known}; "
                              "no default processor)")
        await handler(job)


def _load(kind: str, entry: Any, threads: HandlerThreads) -> Handler:
    spec, args = (entry, {}) if isinstance(entry, str) else (entry["processor"], entry.get("args", {}))
    try:
        return as_async(load_processor(spec, args), threads)
    except ConfigError as exc:
        raise ConfigError(str(exc).split(": ", 1)[-1], key=f"consumer.processors.{kind}") from exc


def require_processor(consumer: ConsumerConfig) -> None:
    """Refuse a consumer with nothing to run: it would settle jobs nobody ran."""
    if not consumer.processor and not consumer.processors:
        raise ConfigError("no processor configured: name one with --processor (a built-in such "
                          "as noop, or module:function) or set consumer.processors",
                          key="consumer.processor")


def build_handler(consumer: ConsumerConfig, threads: HandlerThreads | None = None) -> Handler:
    """The pool's handler: the single processor, or a KindRouter when kinds are routed.

    Plain ``def`` processors run in ``threads`` (by default, a new set of ``concurrency``).
    """
    require_processor(consumer)
    threads = threads or HandlerThreads(consumer.concurrency)
    default = (as_async(load_processor(consumer.processor, consumer.processor_args), threads)
               if consumer.processor else None)
    if not consumer.processors:
        assert default is not None  # require_processor
        return default  # one processor: no routing step on the hot path
    return KindRouter({kind: _load(kind, entry, threads)
                       for kind, entry in consumer.processors.items()}, default)
