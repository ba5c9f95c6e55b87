"""connection.blocked/unblocked: heard from aiormq, logged, exported; copies fail in time."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.observability.metrics import Metrics
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.copies import Copier, CopyTimeout


class RawConnection:
    """What aiormq's Connection looks like to the hook: its private frame handlers."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    async def _Connection__handle_connection_blocked(self, frame: Any) -> None:
        self.frames.append("blocked")

    async def _Connection__handle_connection_unblocked(self, frame: Any) -> None:
        self.frames.append("unblocked")


async def test_blocked_and_unblocked_are_heard_logged_and_exported(
        caplog: pytest.LogCaptureFixture) -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="q copies")
    raw = RawConnection()
    conn: Any = SimpleNamespace(transport=SimpleNamespace(connection=raw), is_closed=False)
    link._conn = conn
    link._watch_blocking(conn)
    transport = RabbitTransport(link, RabbitConfig(), queue="q", prefetch=8, max_attempts=3)
    metrics = Metrics("rabbitmq", "q")
    metrics.watch(SimpleNamespace(in_flight=0, buffered=0, consuming=True),  # type: ignore[arg-type]
                  transport)

    def gauge() -> float | None:
        return metrics.registry.get_sample_value("jobq_broker_blocked",
                                                 {"transport": "rabbitmq", "queue": "q"})

    assert gauge() == 0.0
    with caplog.at_level(logging.WARNING, "jobq.rabbitmq"):
        await raw._Connection__handle_connection_blocked(SimpleNamespace(reason="low on memory"))
    assert link.blocked and transport.blocked and not link.unblocked.is_set()
    assert gauge() == 1.0
    assert "blocks publishing on the q copies connection (low on memory)" in caplog.text
    await raw._Connection__handle_connection_unblocked(SimpleNamespace())
    assert not link.blocked and link.unblocked.is_set() and gauge() == 0.0
    assert raw.frames == ["blocked", "unblocked"]  # aiormq's own handling still runs


class Unconfirmed:
    """A channel whose publishes are never confirmed (a blocked broker reads nothing)."""

    async def basic_publish(self, *_args: Any, **_kwargs: Any) -> None:
        await asyncio.Event().wait()


async def test_a_copy_not_confirmed_in_time_fails_and_later_releases_fail_at_once() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    copier = Copier(link, timeout=0.2)
    props = Basic.Properties(message_id="1")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(CopyTimeout, match=r"not confirmed within 0.2s \(rabbitmq.publish_timeout\)"):
        await copier.send(Unconfirmed(), b"{}", props, exchange="", routing_key="q")  # type: ignore[arg-type]
    assert loop.time() - started < 1
    assert copier.failing
    with pytest.raises(CopyTimeout, match="not sent"):
        copier.refuse("q")
