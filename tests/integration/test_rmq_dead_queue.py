"""<q>.dead is a classic queue (no delivery limit on RabbitMQ 3.10 or 4.x); one an older jobq
declared as quorum is refused naming the setting that keeps it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import aiormq
import pytest

from jobq.config import ConnectConfig, RabbitConfig
from jobq.transports.rabbitmq.admin import RabbitAdmin
from jobq.transports.rabbitmq.connect import RabbitLink
from tests.conftest import AMQP_URL
from tests.contract.backends import Backend


async def declare_dead(queue: str, queue_type: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(f"{queue}.dead", durable=True,
                                    arguments={"x-queue-type": queue_type})


def test_the_dead_queue_is_classic_and_walking_it_keeps_every_dead_letter(
        rabbit: Backend, tmp_path: Path) -> None:
    # Declared classic by `jobq init` (the fixture), whatever the work queue's type (quorum).
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="current is 'classic'"):
        asyncio.run(declare_dead(rabbit.queue, "quorum"))
    rabbit.inject_malformed()
    assert rabbit.run("consumer", "--once", "-p", "tests.processors:record",
                      "-a", f"directory={tmp_path}").returncode == 0
    assert asyncio.run(list_often(rabbit.queue, 22)) == [["4242"]] * 22
    assert [row["id"] for row in rabbit.dead()] == ["4242"]


async def list_often(queue: str, times: int) -> list[list[str | None]]:
    """``jobq dead list`` ``times`` times: more than RabbitMQ 4.x's default quorum delivery
    limit (20), each returning what it walked by closing its channel."""
    link = RabbitLink(AMQP_URL, ConnectConfig(), role="test")
    await link.open()
    try:
        admin = RabbitAdmin(link, RabbitConfig(), queue=queue)
        return [[row.id for row in await admin.dead_list()] for _ in range(times)]
    finally:
        await link.close()


def test_a_quorum_dead_queue_of_an_older_jobq_is_refused_then_kept_when_asked(rabbit: Backend) -> None:
    rabbit.cleanup()
    asyncio.run(declare_dead(rabbit.queue, "quorum"))
    refused = rabbit.run("jobq", "init")
    assert refused.returncode == 2 and "rabbitmq.dead_queue_type" in refused.stderr, refused.stderr
    rabbit.set(RABBITMQ__DEAD_QUEUE_TYPE="quorum")
    assert rabbit.run("jobq", "init").returncode == 0
