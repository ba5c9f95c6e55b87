"""RabbitTransport without a broker: a settle for a lost session is dropped, never sent."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from jobq.config import ConnectConfig, RabbitConfig
from jobq.job import Delivery, Job
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
    await transport.ack(stale_delivery())
    await transport.retry(stale_delivery(), 1.0, "boom")
    await transport.dead_letter(stale_delivery(), "boom")
    await transport.release(stale_delivery())
    assert transport.stale == 4
