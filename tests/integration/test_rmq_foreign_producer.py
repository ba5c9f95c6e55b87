"""A producer that knows nothing of jobq: plain JSON messages, no message_id, no type, sent
with pika (a client jobq does not use itself).

Before, each was dead-lettered as malformed ("message has no message_id"). With the opt-in
(``rabbitmq.default_kind``) it is a job of that kind with an id given at first receipt, which
its retries and its dead letter keep; without it, the dead letter says how to opt in.
"""

from __future__ import annotations

from pathlib import Path

import pika

from tests.conftest import AMQP_URL
from tests.contract.backends import Backend
from tests.processors import completions


def publish_plain(queue: str, bodies: list[bytes]) -> None:
    """What a pika / amqplib / Spring producer sends by default: a body and a routing key."""
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("jobq", queue, body, pika.BasicProperties(
                content_type="application/json", delivery_mode=2), mandatory=True)
    finally:
        connection.close()


def test_plain_json_messages_run_once_each(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.set(RABBITMQ__DEFAULT_KIND="email")
    publish_plain(rabbit.queue, [b'{"to": "a@b"}', b'{"to": "c@d"}', b"{}"])
    result = rabbit.run("consumer", "--once", "--processor", "tests.processors:record",
                        "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    done = completions(tmp_path)
    assert len(done) == 3 and len(set(done)) == 3, done
    assert rabbit.dead() == [] and rabbit.waiting() == 0


def test_a_failing_plain_message_keeps_its_id_through_retries_to_its_dead_letter(
        rabbit: Backend, tmp_path: Path) -> None:
    rabbit.set(RETRY__MAX_ATTEMPTS="2", RETRY__BASE_DELAY="0.1", RABBITMQ__DEFAULT_KIND="notify")
    publish_plain(rabbit.queue, [b'{"hook": "https://example.test"}'])
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


def test_without_the_opt_in_a_plain_message_is_dead_lettered_saying_how(
        rabbit: Backend, tmp_path: Path) -> None:
    publish_plain(rabbit.queue, [b'{"to": "a@b"}'])
    result = rabbit.run("consumer", "--once", "--processor", "tests.processors:record",
                        "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    (dead,) = rabbit.dead()
    assert dead["last_error"].startswith("MalformedJob: message has no message_id")
    assert "set rabbitmq.default_kind" in dead["last_error"] and completions(tmp_path) == []
