"""One processor per job kind (``consumer.processors``), the single ``processor`` as the default.

A job whose kind has no processor and no default fails with UnknownKind, a PermanentError:
the pool dead-letters it with a reason naming the kind, and the consumer goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from jobq.config import ConsumerConfig
from jobq.core.errors import ConfigError, UnknownKind
from jobq.core.job import Job
from jobq.worker.middleware import Middleware
from jobq.worker.processor import Handler, as_async, load_object, load_processor
from jobq.worker.retry import RetryPolicy
from jobq.worker.threads import HandlerThreads


class TaskSource(Protocol):
    """What ``consumer.app`` names: a ``jobq.App``, which routes each job to its task."""

    def consumer_handler(self, threads: HandlerThreads) -> Handler:
        """The pool's handler."""

    def consumer_middleware(self) -> list[Middleware]:
        """One consumer's per-job middleware: the app's failure hooks, then those it added."""

    def consumer_policy(self, default: RetryPolicy) -> RetryPolicy:
        """The retry policy: ``default``, with the backoff of each task that has its own."""

    def serving(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Its start-up hooks on the way in, its shutdown hooks on the way out."""


class KindRouter:
    """Runs the handler registered for ``job.kind``, else the default, else UnknownKind."""

    def __init__(self, routes: Mapping[str, Handler], default: Handler | None, *,
                 unknown: str = "no processor for kind {kind} (known kinds: {known}; "
                                "no default processor)") -> None:
        self._routes = dict(routes)
        self._default = default
        self._unknown = unknown  # the UnknownKind reason: {kind} and {known} filled in
        self._known = ", ".join(sorted(routes)[:20])

    def __call__(self, job: Job) -> Awaitable[None]:
        """Dispatch ``job`` by its kind: the handler's own awaitable (no coroutine around it)."""
        handler = self._routes.get(job.kind, self._default)
        if handler is None:
            raise UnknownKind(self._unknown.format(kind=repr(job.kind[:100]), known=self._known))
        return handler(job)


def _load(kind: str, entry: Any, threads: HandlerThreads) -> Handler:
    spec, args = (entry, {}) if isinstance(entry, str) else (entry["processor"], entry.get("args", {}))
    try:
        return as_async(load_processor(spec, args), threads)
    except ConfigError as exc:
        raise ConfigError(str(exc).split(": ", 1)[-1], key=f"consumer.processors.{kind}") from exc


def require_processor(consumer: ConsumerConfig) -> None:
    """Refuse a consumer with nothing to run: it would settle jobs nobody ran."""
    if consumer.app and (consumer.processor or consumer.processors):
        raise ConfigError("an app's tasks run instead of processors: set consumer.app (-A) or "
                          "consumer.processor / consumer.processors, not both", key="consumer.app")
    if not consumer.processor and not consumer.processors and not consumer.app:
        raise ConfigError("no processor configured: name one with --processor (a built-in such "
                          "as noop, or module:function), an app's tasks with --app "
                          "(module:app), or set consumer.processors", key="consumer.processor")


def describe_handler(consumer: ConsumerConfig) -> str:
    """What the consumer runs, for its start line: ``app myapp.tasks:app`` or ``processor ...``."""
    if consumer.app:
        return f"app {consumer.app}"
    routed = f", {len(consumer.processors)} kinds routed" if consumer.processors else ""
    return f"processor {consumer.processor or '(none)'}{routed}"


def task_source(consumer: ConsumerConfig) -> TaskSource | None:
    """The ``jobq.App`` that ``consumer.app`` names (``module:attribute``); None without one."""
    if not consumer.app:
        return None
    app = load_object(consumer.app, key="consumer.app")
    if not all(callable(getattr(app, name, None))
               for name in ("consumer_handler", "consumer_middleware", "consumer_policy",
                            "serving")):
        raise ConfigError(f"{consumer.app!r} is not a jobq.App (it has no tasks to run)",
                          key="consumer.app")
    source: TaskSource = app
    return source


def build_handler(consumer: ConsumerConfig, threads: HandlerThreads | None = None,
                  source: TaskSource | None = None) -> Handler:
    """The pool's handler: an app's (``source``, else the one ``consumer.app`` names), the
    single processor, or a KindRouter when kinds are routed.

    Plain ``def`` processors run in ``threads`` (by default, a new set of ``concurrency``).
    """
    require_processor(consumer)
    threads = threads or HandlerThreads(consumer.concurrency)
    if consumer.app:
        app = source or task_source(consumer)
        assert app is not None  # consumer.app is set
        return app.consumer_handler(threads)
    default = (as_async(load_processor(consumer.processor, consumer.processor_args), threads)
               if consumer.processor else None)
    if not consumer.processors:
        assert default is not None  # require_processor
        return default  # one processor: no routing step on the hot path
    return KindRouter({kind: _load(kind, entry, threads)
                       for kind, entry in consumer.processors.items()}, default)
