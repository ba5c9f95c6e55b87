"""A lost channel is noticed whatever saw it first: a copy's publish failing on a closed channel,
or a channel found closed with no close callback run, ends the session and the supervisor
reconnects (issue 20: a consumer hung with no reconnect after a broker restart)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import SimpleNamespace
from typing import Any

import aiormq
import pytest
from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.errors import ConnectionLost
from jobq.core.job import Delivery, Job, RetryIn
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.session import Handle, Session


class FakeChannel:
    """A channel whose close is never reported (its callbacks never run)."""

    def __init__(self) -> None:
        self.close_callbacks: set[Any] = set()
        self.is_closed = False

    async def close(self) -> None:
        self.is_closed = True


class FakeRaw:
    """The aiormq channel: publishes fail as on a closed channel; nacks and acks are recorded."""

    def __init__(self) -> None:
        self.nacked: list[int] = []

    async def basic_publish(self, *_args: Any, **_kwargs: Any) -> None:
        raise aiormq.exceptions.ChannelInvalidStateError("<Channel: 2> closed")

    async def basic_nack(self, tag: int, **_kwargs: Any) -> None:
        self.nacked.append(tag)

    async def basic_ack(self, *_args: Any, **_kwargs: Any) -> None:
        return None


class OpenLink(RabbitLink):
    """A link that claims to be open and reconnects instantly (counting the reopens)."""

    def __init__(self) -> None:
        super().__init__("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(backoff_base=0.01,
                                                                          backoff_max=0.01),
                         role="test")
        self.reopened = 0

    @property
    def is_open(self) -> bool:
        return True

    async def reopen(self) -> None:
        self.reopened += 1


def session(raw: FakeRaw) -> Session:
    consume, publish = FakeChannel(), FakeChannel()
    return Session(1, consume, raw, publish, raw,  # type: ignore[arg-type]
                   ack_interval=0.01, ack_batch=4, logger=logging.getLogger("test"))


async def supervised(link: OpenLink, first: Session) -> tuple[RabbitTransport, asyncio.Event]:
    transport = RabbitTransport(link, RabbitConfig(), queue="q", prefetch=8, max_attempts=3)
    started = asyncio.Event()

    async def start() -> None:
        transport._sessions.current = session(FakeRaw())
        started.set()

    transport._sessions.start = start  # type: ignore[method-assign]
    transport._sessions.current = first
    transport._sessions.task = asyncio.create_task(transport._sessions.supervise())
    return transport, started


def delivery(of: Session, tag: int) -> Delivery:
    props = Basic.Properties(message_id="1", message_type="k", headers={"x-jobq-attempt": 1})
    message: Any = SimpleNamespace(body=b'{"a":1}', header=SimpleNamespace(properties=props))
    return Delivery(job=Job(id="1", queue="q", kind="k", payload={"a": 1}),
                    handle=Handle(of, tag, message))


async def test_a_copy_failing_on_a_closed_channel_ends_the_session_and_reconnects() -> None:
    raw = FakeRaw()
    lost = session(raw)
    transport, started = await supervised(OpenLink(), lost)
    try:
        with pytest.raises(ConnectionLost, match="ChannelInvalidStateError"):
            await transport.settle(delivery(lost, 1), RetryIn(1.0, "boom"))
        assert not lost.alive  # before: the nack went out and the session lived on, unconsumed
        assert "publish failed" in lost.reason
        async with asyncio.timeout(2):
            await started.wait()
        assert transport.health().counters["reconnects"] == 1
    finally:
        await transport.close()


async def test_a_channel_found_closed_without_a_callback_is_reconnected() -> None:
    lost = session(FakeRaw())
    transport, started = await supervised(OpenLink(), lost)
    try:
        lost.publish.is_closed = True  # type: ignore[misc]
        async with asyncio.timeout(3):  # the supervisor looks every WATCH (1 s)
            await started.wait()
        assert not lost.alive
    finally:
        await transport.close()


async def test_a_cancel_swallowed_while_reconnecting_still_lets_the_consumer_close() -> None:
    lost = session(FakeRaw())
    transport, _ = await supervised(OpenLink(), lost)
    reconnecting = asyncio.Event()

    async def start() -> None:
        # As aio-pika's calls under 3.11's wait_for: a cancel landing as the reply arrives is
        # lost, and the call returns (a consumer outlived SIGTERM so, under load).
        reconnecting.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        transport._sessions.current = session(FakeRaw())

    transport._sessions.start = start  # type: ignore[method-assign]
    lost.end("the broker reset the connection")
    async with asyncio.timeout(2):
        await reconnecting.wait()
    async with asyncio.timeout(5):  # before: the supervisor watched the new session for ever
        await transport.close()
