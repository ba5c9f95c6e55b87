"""RabbitTransport without a broker: a settle for a lost session is dropped, never sent; copies
are published raw on the session's confirming channel."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.job import Ack, Dead, Delivery, Job, Release, RetryIn
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.session import Handle


class DeadSession:
    """A session whose connection is gone: any use but ``alive`` is a test failure."""

    alive = False

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a lost session was used: {name}")


def stale_delivery() -> Delivery:
    message: Any = SimpleNamespace(body=b"{}", header=SimpleNamespace(properties=None))
    handle = Handle(DeadSession(), 7, message)  # type: ignore[arg-type]
    return Delivery(job=Job(id="1", queue="q", kind="k", payload={}), handle=handle)


async def test_settles_of_a_lost_session_are_dropped() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    transport = RabbitTransport(link, RabbitConfig(), queue="q", prefetch=8, max_attempts=3)
    await transport.settle(stale_delivery(), Ack())
    await transport.settle(stale_delivery(), RetryIn(1.0, "boom"))
    await transport.settle(stale_delivery(), Dead("boom"))
    await transport.settle(stale_delivery(), Release())
    assert transport.health().counters["stale"] == 4


class LiveSession:
    """A session whose publishing channel records what is published on it."""

    alive = True

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.completed: list[int] = []
        self.sender = SimpleNamespace(basic_publish=self._publish)

    async def _publish(self, body: bytes, **kwargs: Any) -> None:
        self.published.append({"body": body, **kwargs})

    def complete(self, tag: int) -> None:
        self.completed.append(tag)


async def test_copies_are_published_raw_with_confirms_and_mandatory() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    transport = RabbitTransport(link, RabbitConfig(), queue="q", prefetch=8, max_attempts=3)
    session = LiveSession()
    props = Basic.Properties(message_id="1", message_type="k", headers={"x-jobq-attempt": 1})
    message: Any = SimpleNamespace(body=b'{"a":1}', header=SimpleNamespace(properties=props))

    def delivery(tag: int) -> Delivery:
        handle = Handle(session, tag, message)  # type: ignore[arg-type]
        return Delivery(job=Job(id="1", queue="q", kind="k", payload={"a": 1}), handle=handle)

    await transport.settle(delivery(1), RetryIn(0, "boom"))
    await transport.settle(delivery(2), Dead("boom"))
    await transport.settle(delivery(3), Release())
    assert [(p["exchange"], p["routing_key"]) for p in session.published] == [
        ("", "q"), ("q.dlx", "q"), ("", "q")]
    assert all(p["body"] == b'{"a":1}' and p["mandatory"] for p in session.published)
    assert all(p["properties"].delivery_mode == 2 for p in session.published)
    assert session.published[1]["properties"].headers["x-jobq-error"] == "boom"
    assert session.completed == [1, 2, 3]  # each original acked once its copy is confirmed
