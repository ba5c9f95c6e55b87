"""What a consumer runs, as the composition root builds it: the handler (an app's tasks, the
processor or the processors by kind, inside a span with tracing on) and an app's start-up and
shutdown hooks around the run."""

from __future__ import annotations

import contextlib
from typing import Any

from jobq.config import Settings
from jobq.worker.routing import TaskSource, build_handler
from jobq.worker.threads import HandlerThreads


def handler(settings: Settings, threads: HandlerThreads, tracing: Any,
            source: TaskSource | None) -> Any:
    """The configured processor (or per-kind processors, or an app's tasks), awaitable whatever
    it is; inside a span per job with tracing on (``tracing``: a JobTracing, else None)."""
    built = build_handler(settings.consumer, threads, source)
    return built if tracing is None else tracing.wrap(built)


def serving(source: TaskSource | None) -> contextlib.AbstractAsyncContextManager[None]:
    """``source``'s start-up hooks on the way in, its shutdown hooks on the way out; nothing
    without an app."""
    return source.serving() if source is not None else contextlib.nullcontext()
