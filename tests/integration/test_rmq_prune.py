"""`jobq prune` on RabbitMQ: dead letters older than --older-than leave <q>.dead; the younger
ones, and those of unknown age, stay, in their order."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aio_pika

from tests.conftest import AMQP_URL
from tests.contract.backends import Backend


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


# message_id -> headers: jobq's dead-at (old or young), the broker's x-death time only, or none.
LETTERS: dict[str, dict[str, Any]] = {
    "old-1": {"x-jobq-dead-at": ago(7200).isoformat(timespec="milliseconds")},
    "young-1": {"x-jobq-dead-at": ago(60).isoformat(timespec="milliseconds")},
    "old-2": {"x-jobq-dead-at": ago(86400 * 3).isoformat(timespec="milliseconds")},
    "undated": {},
    "broker-old": {"x-death": [{"time": ago(7200).replace(microsecond=0), "reason": "delivery_limit",
                                "queue": "elsewhere", "count": 1}]},
    "unreadable": {"x-jobq-dead-at": "yesterday"},
    "young-2": {"x-jobq-dead-at": ago(30).isoformat(timespec="milliseconds")},
}


async def bury(queue: str) -> None:
    """Put LETTERS into ``queue``.dead in order, as dead letters of some age."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        for message_id, headers in LETTERS.items():
            await channel.default_exchange.publish(
                aio_pika.Message(b"{}", message_id=message_id, type="k", headers=headers,
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=f"{queue}.dead")


def prune(rabbit: Backend, *args: str) -> tuple[int, str, str]:
    result = rabbit.run("jobq", "prune", *args)
    return result.returncode, result.stdout, result.stderr


def test_prune_deletes_old_dead_letters_and_keeps_the_rest_in_order(
        rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(1, "--kind", "bad")  # a dead letter written by a real consumer, just now
    consumed = rabbit.run("consumer", "--once", "-p", "tests.processors:record",
                          "-a", f"directory={tmp_path}", "-a", "fail_kind=bad")
    assert consumed.returncode == 0, consumed.stderr
    (real,) = [row["id"] for row in rabbit.dead()]
    asyncio.run(bury(rabbit.queue))
    buried_at = time.monotonic()

    code, out, err = prune(rabbit, "--older-than", "1h")
    assert (code, out) == (0, f"pruned 3 dead jobs older than 1h from queue {rabbit.queue!r}\n"), err
    assert "WARNING" in err and "kept 5 dead letters" in err, err  # warned: shown without -v
    assert "(2 without a dead-at time: never pruned by age" in err, err
    # Returned by the channel's close to where they were: the order of the queue is kept.
    assert [row["id"] for row in rabbit.dead()] == [real, "young-1", "undated", "unreadable",
                                                    "young-2"]

    time.sleep(max(0.0, 1.5 - (time.monotonic() - buried_at)))
    code, out, err = prune(rabbit, "--older-than", "1", "--state", "dead")
    assert (code, out) == (0, f"pruned 3 dead jobs older than 1s from queue {rabbit.queue!r}\n"), err
    assert [row["id"] for row in rabbit.dead()] == ["undated", "unreadable"]  # never pruned


def test_prune_on_rabbitmq_needs_an_age_and_knows_no_done_jobs(rabbit: Backend) -> None:
    code, _, err = prune(rabbit, "--state", "done", "--older-than", "1d")
    assert code == 2 and "--state: RabbitMQ keeps no done jobs" in err, err
    code, _, err = prune(rabbit)
    assert code == 2 and "--older-than: RabbitMQ has no retention setting" in err, err
    code, out, err = prune(rabbit, "--older-than", "1d")  # an empty dead queue: nothing to do
    assert (code, out) == (0, f"pruned 0 dead jobs older than 1d from queue {rabbit.queue!r}\n"), err
