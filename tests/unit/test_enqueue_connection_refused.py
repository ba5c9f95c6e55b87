"""Transactional enqueue and unique keys are PostgreSQL's alone: the others refuse them loudly."""

from __future__ import annotations

import pytest

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.errors import ConfigError
from jobq.core.port import NewJob
from jobq.transports.memory import MemoryPublisher, MemoryStore
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.publisher import RabbitPublisher


async def test_the_rabbitmq_publisher_refuses_to_pretend_it_joined_a_transaction() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="producer")
    publisher = RabbitPublisher(link, RabbitConfig(), queue="q", max_attempts=3)
    with pytest.raises(ConfigError, match="needs the PostgreSQL backend") as refused:
        await publisher.enqueue(NewJob(kind="k"), connection=object())
    assert refused.value.key == "transport"


async def test_the_memory_store_refuses_it_too() -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError, match="no transactions"):
        await MemoryPublisher(store).enqueue_many([NewJob(kind="k")], connection=object())
    assert not store.entries


async def test_the_rabbitmq_publisher_refuses_unique_keys_rather_than_ignore_them() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="producer")
    publisher = RabbitPublisher(link, RabbitConfig(), queue="q", max_attempts=3)
    with pytest.raises(ConfigError, match="unique keys"):
        await publisher.enqueue_many([NewJob(kind="k"), NewJob(kind="k", key="a")])
