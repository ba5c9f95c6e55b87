"""Processors: the user's handler, loaded from ``module:function`` or a demo built-in's name."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from jobq.core.errors import ConfigError
from jobq.core.job import Job
from jobq.demo_processors import BUILTINS
from jobq.worker.threads import HandlerThreads


class Processor(Protocol):
    """``async def handle(job) -> None``; a plain ``def`` is run in a worker thread."""

    def __call__(self, job: Job, /) -> Awaitable[None] | None: ...


Handler = Callable[[Job], Awaitable[None]]


def load_processor(spec: str, args: Mapping[str, Any] | None = None) -> Processor:
    """Resolve a built-in name or ``module:function``.

    With ``args``, a ``module:function`` is treated as a factory called with them.
    """
    args = dict(args or {})
    if ":" not in spec:
        factory = BUILTINS.get(spec)
        if factory is None:
            known = ", ".join(sorted(BUILTINS))
            raise ConfigError(f"unknown processor {spec!r} (built-ins: {known}; or module:function)",
                              key="consumer.processor")
        try:
            return factory(**args)
        except TypeError as exc:
            raise ConfigError(f"bad arguments for {spec}: {exc}", key="consumer.processor_args") from exc
    target = load_object(spec, key="consumer.processor")
    if args:
        target = target(**args)
    if not callable(target):
        raise ConfigError(f"{spec!r} is not callable", key="consumer.processor")
    return target  # type: ignore[no-any-return]


def load_object(spec: str, *, key: str) -> Any:
    """The object at ``module:attribute``, the current directory importable as uvicorn and
    Celery make it (a console script's own directory is on sys.path, not the current one)."""
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {spec!r}: {exc}", key=key) from exc
    return target


def as_async(processor: Processor, threads: HandlerThreads | None = None) -> Handler:
    """Wrap a processor so the pool can always ``await`` it; plain functions go to ``threads``.

    A plain function that overruns the job timeout cannot be interrupted (Python cannot kill
    a thread). Its job is settled only once the thread returned, so it is never handed out
    (and run a second time) while the first run still goes on; the worker waits with it.
    """
    if inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
        getattr(processor, "__call__", None)  # noqa: B004 - callable objects with async __call__
    ):
        return processor  # type: ignore[return-value]
    submit = (threads or HandlerThreads(1)).submit
    log = logging.getLogger("jobq.processor")

    async def in_thread(job: Job) -> None:
        running = submit(contextvars.copy_context().run, processor, job)
        try:
            result = await asyncio.wrap_future(running)
        except asyncio.CancelledError:
            if not running.running():
                raise
            # Timed out (or interrupted at shutdown): wait for the thread before settling. A
            # second cancellation (the pool giving up at the end of a shutdown) is not waited.
            log.warning("job %s: its handler thread cannot be interrupted; the job is settled "
                        "when the thread returns", job.id, extra={"job_id": job.id})
            await asyncio.wait([asyncio.wrap_future(running)])
            raise
        if inspect.isawaitable(result):
            await result

    return in_thread
