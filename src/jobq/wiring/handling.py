"""What a consumer runs, as the composition root builds it: the handler (an app's tasks, the
processor or the processors by kind, inside a span with tracing on) and an app's start-up and
shutdown hooks around the run."""

from __future__ import annotations

import contextlib

from jobq.config import Settings
from jobq.worker.middleware import Middleware, wrapped
from jobq.worker.processor import Handler
from jobq.worker.retry import RetryPolicy
from jobq.worker.routing import TaskSource, build_handler
from jobq.worker.threads import HandlerThreads


def app_middleware(source: TaskSource | None) -> list[Middleware]:
    """An app's per-job middleware for this consumer (its failure hooks first); none without."""
    return source.consumer_middleware() if source is not None else []


def retry_policy(default: RetryPolicy, source: TaskSource | None) -> RetryPolicy:
    """The config's retry policy, with the backoff of an app's tasks that have their own."""
    return source.consumer_policy(default) if source is not None else default


def handler(settings: Settings, threads: HandlerThreads, tracing: Middleware | None,
            source: TaskSource | None, middleware: list[Middleware]) -> Handler:
    """The configured processor (or per-kind processors, or an app's tasks), awaitable whatever
    it is, inside the ``around`` of the tracing (when on) and of the app's ``middleware``."""
    built = build_handler(settings.consumer, threads, source)
    return wrapped([*([tracing] if tracing is not None else []), *middleware], built)


def serving(source: TaskSource | None) -> contextlib.AbstractAsyncContextManager[None]:
    """``source``'s start-up hooks on the way in, its shutdown hooks on the way out; nothing
    without an app."""
    return source.serving() if source is not None else contextlib.nullcontext()
