"""Processors: the user's handler, loaded from ``module:function``, and the built-ins."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import os
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from jobq.errors import ConfigError, PermanentError, Retry
from jobq.job import Job


class Processor(Protocol):
    """``async def handle(job) -> None``; a plain ``def`` is run in a worker thread."""

    def __call__(self, job: Job) -> Awaitable[None] | None: ...


Handler = Callable[[Job], Awaitable[None]]


def noop() -> Processor:
    """Does nothing: measures the queue, not the work."""

    async def handle(job: Job) -> None:
        return None

    return handle


def sleep(ms: float = 10.0, jitter: float = 0.0) -> Processor:
    """Waits ``ms`` milliseconds (plus up to ``jitter`` ms at random): an I/O-bound job."""
    rand = random.Random()

    async def handle(job: Job) -> None:
        await asyncio.sleep((ms + jitter * rand.random()) / 1000.0)

    return handle


def cpu(rounds: int = 1000) -> Processor:
    """Hashes ``rounds`` times in a thread: a CPU-bound job."""

    def handle(job: Job) -> None:
        digest = job.id.encode()
        for _ in range(rounds):
            digest = hashlib.sha256(digest).digest()

    return handle


def flaky(rate: float = 0.1, delay: float | None = None) -> Processor:
    """Fails a fraction ``rate`` of attempts with a retryable error."""
    rand = random.Random()

    async def handle(job: Job) -> None:
        if rand.random() < rate:
            raise Retry(delay=delay, reason=f"flaky: attempt {job.attempt} failed on purpose")

    return handle


def fail(message: str = "this job always fails") -> Processor:
    """Always fails permanently: the job is dead-lettered at once."""

    async def handle(job: Job) -> None:
        raise PermanentError(message)

    return handle


def crash(exit_code: int = 137) -> Processor:
    """Kills its own process at once (no cleanup), like a segfault or the OOM killer."""

    def handle(job: Job) -> None:
        os._exit(exit_code)

    return handle


BUILTINS: Mapping[str, Callable[..., Processor]] = {
    "noop": noop,
    "sleep": sleep,
    "cpu": cpu,
    "flaky": flaky,
    "fail": fail,
    "crash": crash,
}


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
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {spec!r}: {exc}", key="consumer.processor") from exc
    if args:
        target = target(**args)
    if not callable(target):
        raise ConfigError(f"{spec!r} is not callable", key="consumer.processor")
    return target  # type: ignore[no-any-return]


def as_async(processor: Processor) -> Handler:
    """Wrap a processor so the pool can always ``await`` it; plain functions go to a thread."""
    if inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
        getattr(processor, "__call__", None)  # noqa: B004 - callable objects with async __call__
    ):
        return processor  # type: ignore[return-value]

    async def in_thread(job: Job) -> None:
        result = await asyncio.to_thread(processor, job)
        if inspect.isawaitable(result):
            await result

    return in_thread
