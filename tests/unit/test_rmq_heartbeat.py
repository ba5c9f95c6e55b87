"""rabbitmq.heartbeat: asked for on every connection (in the URL, where aiormq reads it),
unless the URL sets its own; 0 leaves the URL alone (aiormq's 60 s)."""

from __future__ import annotations

from typing import Any

import aio_pika
import aiormq
import pytest

from jobq.config import ConnectConfig, load_settings
from jobq.core.errors import ConfigError
from jobq.transports.rabbitmq.connect import RabbitLink, with_heartbeat


@pytest.mark.parametrize(("url", "expected"), [
    ("amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:guest@127.0.0.1:5672/?heartbeat=10"),
    ("amqp://mq/vhost?name=x", "amqp://mq/vhost?name=x&heartbeat=10"),
    ("amqp://mq/?", "amqp://mq/?heartbeat=10"),
    ("amqps://mq/?cafile=/ca.pem#x", "amqps://mq/?cafile=/ca.pem&heartbeat=10#x"),
    ("amqp://mq/?heartbeat=2", "amqp://mq/?heartbeat=2"),  # the URL's own wins
    ("amqp://mq/?a=1&heartbeat=0", "amqp://mq/?a=1&heartbeat=0"),
])
def test_the_url_carries_the_heartbeat_unless_it_sets_its_own(url: str, expected: str) -> None:
    assert with_heartbeat(url, 10) == expected


def test_zero_leaves_the_url_alone() -> None:
    assert with_heartbeat("amqp://mq/", 0) == "amqp://mq/"


def test_the_setting_defaults_to_10_s_and_is_checked() -> None:
    assert load_settings(None, env={}).rabbitmq.heartbeat == 10
    assert load_settings(None, env={"JOBQ_RABBITMQ__HEARTBEAT": "0"}).rabbitmq.heartbeat == 0
    with pytest.raises(ConfigError, match=r"rabbitmq\.heartbeat: bad value"):
        load_settings(None, {"rabbitmq.heartbeat": -1}, env={})


async def test_the_link_connects_with_it_and_aiormq_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def connect(url: str, **kwargs: Any) -> Any:
        seen.append(url)
        raise ConnectionRefusedError("not really connecting")

    monkeypatch.setattr(aio_pika, "connect", connect)
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(attempts=1), role="t",
                      heartbeat=7)
    with pytest.raises(Exception, match="cannot reach"):
        await link.open()
    assert seen == ["amqp://guest:guest@127.0.0.1:1/?heartbeat=7"]
    # What aiormq asks the broker for (read from the URL's query; 60 when absent).
    assert aiormq.Connection(seen[0]).heartbeat_timeout == 7
    assert aiormq.Connection("amqp://mq/").heartbeat_timeout == 60
