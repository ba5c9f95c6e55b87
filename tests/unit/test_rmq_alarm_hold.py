"""While the broker blocks publishing, a copy is held (its original unacked), not nacked back:
a requeue counts a delivery on quorum queues, and the original would loop back as a crash
redelivery every publish_timeout until the delivery limit dead-lettered a job that never failed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.job import Dead, Release, RetryIn
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from tests.conftest import until
from tests.unit.test_rmq_crash_copies import FakeSession, message


class AlarmSession(FakeSession):
    """A FakeSession that records nacks and can end."""

    def __init__(self) -> None:
        super().__init__()
        self.requeued: list[int] = []
        self.lost = asyncio.Event()

    async def requeue(self, tag: int) -> None:
        self.requeued.append(tag)

    def end(self, reason: str) -> None:
        self.alive = False
        self.lost.set()


async def blocked_transport() -> tuple[RabbitTransport, AlarmSession, RabbitLink]:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="q copies")
    transport = RabbitTransport(link, RabbitConfig(publish_timeout=0.1), queue="q", prefetch=8,
                                max_attempts=3)
    session = AlarmSession()
    transport._sessions.current = session  # type: ignore[assignment]
    transport._sessions.resumed.set()
    link._set_blocked(True, "low on memory")
    return transport, session, link


async def test_a_retry_while_blocked_is_held_then_sent_once_unblocked() -> None:
    transport, session, link = await blocked_transport()
    await transport._on_message(session, message(1))  # type: ignore[arg-type]
    await transport._on_message(session, message(2, **{"x-delivery-count": 1}))  # type: ignore[arg-type]
    (delivery,) = await transport.receive(10, 0.01)

    await transport.settle(delivery, RetryIn(1.5, "failed"))  # returns at once: the worker goes on
    await asyncio.sleep(0.3)  # past publish_timeout: still held, never nacked
    assert session.requeued == [] and session.published == [] and session.completed == []
    # The crash redelivery's copy forward is held too (no nack, no loop of redeliveries).
    assert len(transport._forwarder.held) == 2

    link._set_blocked(False, "")
    # Unblocked: the held copies go out, and each original is acked once its copy is confirmed.
    await until(lambda: not transport._forwarder.held, "the held copies to be sent", 10)
    assert sorted(session.completed) == [1, 2]  # each original acked once its copy is confirmed
    assert sorted(p["routing_key"] for p in session.published) == ["q.alone", "q.retry.1"]
    assert session.requeued == [] and not transport._forwarder.held


async def test_held_copies_end_at_close_left_for_the_channel_close(
        caplog: pytest.LogCaptureFixture) -> None:
    transport, session, _link = await blocked_transport()
    await transport._on_message(session, message(1))  # type: ignore[arg-type]
    (delivery,) = await transport.receive(10, 0.01)
    await transport.settle(delivery, Dead("bad"))
    assert len(transport._forwarder.held) == 1

    transport._state.closing = True
    transport._state.closed.set()
    await asyncio.wait_for(asyncio.gather(*transport._tasks), 1)
    assert session.published == [] and session.completed == [] and session.requeued == []
    assert transport._forwarder.held_back == 1 and not transport._forwarder.held


async def test_a_release_while_blocked_still_fails_at_once() -> None:
    transport, session, _link = await blocked_transport()
    await transport._on_message(session, message(1))  # type: ignore[arg-type]
    (delivery,) = await transport.receive(10, 0.01)
    with pytest.raises(Exception, match="not sent, the broker blocks publishing"):
        await transport.settle(delivery, Release())
    assert session.requeued == [1] and not transport._forwarder.held


async def test_a_copy_that_times_out_when_the_alarm_comes_is_held_too() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="q copies")
    transport = RabbitTransport(link, RabbitConfig(publish_timeout=0.1), queue="q", prefetch=8,
                                max_attempts=3)
    session = AlarmSession()
    confirmed = asyncio.Event()

    async def blocked_publish(body: bytes, **kwargs: Any) -> None:
        link._set_blocked(True, "low on disk")  # heard while this publish waits
        await confirmed.wait()

    session.sender.basic_publish = blocked_publish
    transport._sessions.current = session  # type: ignore[assignment]
    await transport._on_message(session, message(1))  # type: ignore[arg-type]
    (delivery,) = await transport.receive(10, 0.01)
    await transport.settle(delivery, RetryIn(0.2, "failed"))  # timed out, but blocked: held
    assert session.requeued == [] and len(transport._forwarder.held) == 1
    confirmed.set()
    link._set_blocked(False, "")
    await asyncio.wait_for(asyncio.gather(*transport._tasks), 1)
    assert session.completed == [1] and session.requeued == []
