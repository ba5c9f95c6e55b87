"""A start-up abandoned while the server is still being retried unwinds at once, quietly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jobq.api import wired
from jobq.config import load_settings
from jobq.wiring.container import get_worker_pool

UNREACHABLE = {  # a refused port: every attempt fails at once, and the retries go on
    "postgres": {"postgres.dsn": "postgresql://jobq@127.0.0.1:1/nowhere"},
    "rabbitmq": {"rabbitmq.url": "amqp://guest:guest@127.0.0.1:1/"},
}


@pytest.mark.parametrize("transport", ["postgres", "rabbitmq"])
async def test_cancelling_start_up_stops_the_connecting_and_prints_nothing(transport: str) -> None:
    settings = load_settings(None, {"transport": transport, "connect.attempts": 50,
                                    "connect.backoff_base": 0.05, **UNREACHABLE[transport]}, env={})
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def start() -> None:
        async with wired(settings) as container:
            await get_worker_pool(container)

    task = asyncio.create_task(start())
    await asyncio.sleep(0.3)  # retrying by now
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):  # before: shutdown_resources waited out every retry
            await task
    assert time.monotonic() - started < 1.0  # shutdown did not wait out the retries
    await asyncio.sleep(0.1)  # any callback of a half-built provider would run now
    loop.set_exception_handler(None)
    assert reported == []

