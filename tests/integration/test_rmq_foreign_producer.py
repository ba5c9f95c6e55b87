"""A producer that knows nothing of jobq: plain JSON messages, no message_id, no type.

Before, each was dead-lettered as malformed ("message has no message_id"). Now it is a job
of the queue's kind (or ``rabbitmq.default_kind``) with an id given at first receipt, which
its retries and its dead letter keep.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika

from tests.conftest import AMQP_URL
from tests.contract.backends import Backend
from tests.processors import completions


async def publish_plain(queue: str, bodies: list[bytes]) -> None:
    """What an amqplib / pika / Spring producer sends by default: a body and a routing key."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange("jobq")
        for body in bodies:
            await exchange.publish(aio_pika.Message(body, content_type="application/json"),
                                   routing_key=queue)


def test_plain_json_messages_run_once_each(rabbit: Backend, tmp_path: Path) -> None:
    asyncio.run(publish_plain(rabbit.queue, [b'{"to": "a@b"}', b'{"to": "c@d"}', b"{}"]))
    result = rabbit.run("consumer", "--once", "--processor", "tests.processors:record",
                        "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    done = completions(tmp_path)
    assert len(done) == 3 and len(set(done)) == 3, done
    assert rabbit.dead() == [] and rabbit.waiting() == 0


def test_a_failing_plain_message_keeps_its_id_through_retries_to_its_dead_letter(
        rabbit: Backend, tmp_path: Path) -> None:
    rabbit.set(RETRY__MAX_ATTEMPTS="2", RETRY__BASE_DELAY="0.1", RABBITMQ__DEFAULT_KIND="notify")
    asyncio.run(publish_plain(rabbit.queue, [b'{"hook": "https://example.test"}']))
    result = rabbit.run("consumer", "--once", "--processor", "tests.processors:fail_recording",
                        "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    attempts = [line.split()[:2] for file in tmp_path.glob("*.attempts")
                for line in file.read_text().splitlines()]
    assert [a for _, a in attempts] == ["1", "2"] and attempts[0][0] == attempts[1][0], attempts
    (dead,) = rabbit.dead()
    assert dead["id"] == attempts[0][0] and dead["kind"] == "notify"
    assert "ValueError: attempt 2 failed" in dead["last_error"]
    requeued = rabbit.run("jobq", "dead", "requeue", "--id", dead["id"])
    assert requeued.returncode == 0 and dead["id"] in requeued.stdout, requeued.stderr
