"""The Python API: enqueue jobs on either backend from application code."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from jobq.config import Settings, load_settings
from jobq.core.port import Publisher
from jobq.wiring.container import Container, get_publisher
from jobq.wiring.container import resolve as resolve  # where it lived before the typed accessors


@contextlib.asynccontextmanager
async def wired(settings: Settings) -> AsyncIterator[Container]:
    """A container for ``settings`` whose resources are shut down on the way out."""
    container = Container(settings=settings)
    try:
        yield container
    finally:
        closing = container.shutdown_resources()
        if inspect.isawaitable(closing):  # None when no async resource was opened
            await closing


@contextlib.asynccontextmanager
async def connect_publisher(
    config: str | Settings | None = None, **overrides: Any
) -> AsyncIterator[Publisher]:
    """A connected Publisher for the configured backend.

    ``config`` is a YAML path or Settings; ``overrides`` use dotted keys with ``__``
    for dots, e.g. ``connect_publisher("configs/postgres.yaml", queue="emails")``.
    """
    settings = config if isinstance(config, Settings) else load_settings(
        config, {key.replace("__", "."): value for key, value in overrides.items()})
    async with wired(settings) as container:
        publisher = await get_publisher(container)
        await publisher.open()
        try:
            yield publisher
        finally:
            await publisher.close()
