"""A start-up abandoned while the server is still being retried unwinds at once, quietly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from jobq.api import wired
from jobq.config import load_settings
from jobq.wiring.container import get_worker_pool
from tests.conftest import until

UNREACHABLE = {  # a refused port: every attempt fails at once, and the retries go on
    "postgres": {"postgres.dsn": "postgresql://jobq@127.0.0.1:1/nowhere"},
    "rabbitmq": {"rabbitmq.url": "amqp://guest:guest@127.0.0.1:1/"},
}


@pytest.mark.parametrize("transport", ["postgres", "rabbitmq"])
async def test_cancelling_start_up_stops_the_connecting_and_prints_nothing(
        transport: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(None, {"transport": transport, "connect.attempts": 50,
                                    "connect.backoff_base": 0.05, **UNREACHABLE[transport]}, env={})
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def start() -> None:
        async with wired(settings) as container:
            await get_worker_pool(container)

    def refused() -> int:
        """The tries refused so far (each logs "cannot reach ... retrying in")."""
        return sum("cannot reach" in record.getMessage() for record in caplog.records)

    with caplog.at_level(logging.WARNING):
        task = asyncio.create_task(start())
        # Retrying: a try refused, the next one to come after a pause (a fixed sleep here was
        # the imports and the wiring on a slow machine, and cancelled before any try).
        await until(refused, "the first try refused", 10)
        tries = refused()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(5):  # before: shutdown_resources waited out every retry
                await task
        # No try after the cancel: at most the one it cut short reports its failure (a cancel
        # that a connect swallowed, which the backoff finds before the next try). Counted,
        # not timed: a wall-clock bound here is one a loaded machine can exceed.
        assert refused() <= tries + 1
    await asyncio.sleep(0.1)  # any callback of a half-built provider would run now
    loop.set_exception_handler(None)
    assert reported == []
