"""A SIGTERM during the start-up always ends the consumer, whatever the start-up did with its cancel."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import pytest

from jobq.config import load_settings


async def test_a_sigterm_whose_cancel_the_start_up_swallowed_still_stops_the_consumer(
        monkeypatch: pytest.MonkeyPatch, pg_dsn: str, schema: str) -> None:
    # Seen in the fault suite (postgres-lease, 1 run of 40): a SIGTERM during the start-up
    # cancelled it, something on the way caught the CancelledError, the start-up finished and
    # the pool ran on, deaf to that signal, until the suite killed it 60 s later.
    from jobq.cli import consume

    settings = load_settings(None, {"transport": "postgres", "consumer.processor": "noop",
                                    "log.summary_interval": 0, "postgres.dsn": pg_dsn,
                                    "postgres.schema": schema}, env={})
    opened = asyncio.Event()

    real_open = consume.open_transport

    async def swallowing_open(*args: Any) -> None:
        opened.set()
        with contextlib.suppress(asyncio.CancelledError):  # as a careless library might
            await asyncio.sleep(5)
        await real_open(*args)

    monkeypatch.setattr(consume, "open_transport", swallowing_open)
    consuming = asyncio.create_task(consume.consume(settings))
    await opened.wait()
    loop = asyncio.get_running_loop()
    signalled = loop.time()
    os.kill(os.getpid(), signal.SIGTERM)  # consume.signals_to routes it to the loop
    assert await asyncio.wait_for(consuming, 30) == 0
    # Before: the pool ran on, deaf to the signal (here until something else ended it ~10 s
    # later; in the fault suite past the 60 s the suite waits).
    assert loop.time() - signalled < 3.0
