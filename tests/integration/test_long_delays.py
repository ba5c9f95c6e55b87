"""A long delay, checked without waiting for it: the due time is carried and the hop planned."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aio_pika
from psycopg import sql

from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob
from tests.conftest import (
    AMQP_URL,
    PG_DSN,
    ROOT,
    consuming,
    fetch,
    schema_env,
    stop_cli,
    wait_until,
)
from tests.contract.backends import Backend
from tests.processors import due_runs

MONTH = 30 * 86400.0


async def enqueue(backend: Backend, job: NewJob) -> str:
    settings = load_settings(ROOT / "configs" / f"{backend.transport}.yaml",
                             {"queue": backend.queue}, env=backend.env)
    async with connect_publisher(settings) as publisher:
        return await publisher.enqueue(job)


async def tier_messages(queue: str, tier: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """The messages waiting in ``tier``, read and put back (the test only looks)."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        waiting = await channel.declare_queue(f"{queue}.retry.{tier}", passive=True)
        found = []
        while (message := await waiting.get(no_ack=False, fail=False)) is not None:
            found.append(message)
        await channel.close()  # unacked: back in the tier
        return found


async def publish_early(queue: str, due: float) -> None:
    """A jobq message on the work queue before its due time, as a tier hands one back early."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange("jobq")
        await exchange.publish(aio_pika.Message(
            b"{}", message_id="777", type="timed", delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            headers={"x-jobq-attempt": 1, "x-jobq-max-attempts": 3, "x-jobq-due": round(due * 1000)}),
            routing_key=queue)


def test_a_month_long_delay_waits_in_the_day_tier_with_its_due_time(rabbit: Backend,
                                                                    tmp_path: Path) -> None:
    # Before: a delay beyond the longest tier (300 s) waited 300 s and then ran, a month early.
    before = time.time()
    asyncio.run(enqueue(rabbit, NewJob(kind="timed", delay=MONTH)))
    (message,) = asyncio.run(tier_messages(rabbit.queue, "86400"))
    assert message.headers is not None
    due = int(message.headers["x-jobq-due"]) / 1000  # type: ignore[call-overload]
    assert before + MONTH <= due <= time.time() + MONTH + 0.01


def test_a_message_back_early_goes_on_to_the_next_tier_unrun(rabbit: Backend, tmp_path: Path) -> None:
    consumer = rabbit.start("consumer", "--processor", "tests.processors:due_record",
                            "-a", f"directory={tmp_path}")
    consuming(consumer)
    try:
        due = time.time() + 2 * 86400 + 60
        asyncio.run(publish_early(rabbit.queue, due))
        assert wait_until(lambda: len(asyncio.run(tier_messages(rabbit.queue, "86400"))) == 1, 10)
    finally:
        stop_cli(consumer, 20)
    (message,) = asyncio.run(tier_messages(rabbit.queue, "86400"))
    assert message.message_id == "777" and message.headers is not None
    assert message.headers["x-jobq-due"] == round(due * 1000)
    assert message.headers["x-jobq-attempt"] == 1  # a hop is no attempt
    assert due_runs(tmp_path) == []
    assert rabbit.depth()["ready"] == 0


def test_a_month_long_delay_and_a_run_at_on_postgres(schema: str, queue_name: str) -> None:
    backend = Backend("postgres", queue_name, schema_env(schema), schema=schema)
    at = datetime.now(UTC) + timedelta(days=40)
    ids = [asyncio.run(enqueue(backend, NewJob(kind="timed", delay=MONTH))),
           asyncio.run(enqueue(backend, NewJob(kind="timed", run_at=at)))]
    rows = fetch(PG_DSN, sql.SQL("SELECT extract(epoch FROM run_at - now()) FROM {} "
                                 "WHERE id = ANY(%s) ORDER BY id").format(
                                     sql.Identifier(schema, "jobs")), [[int(i) for i in ids]])
    month, forty_days = (float(r[0]) for r in rows)  # type: ignore[arg-type]
    assert abs(month - MONTH) < 5 and abs(forty_days - 40 * 86400) < 5
