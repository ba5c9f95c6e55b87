"""Processors: the user's handler, loaded from ``module:function`` or a demo built-in's name."""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from jobq.demo_processors import BUILTINS
from jobq.errors import ConfigError
from jobq.job import Job


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
