"""Messages the AMQP client cannot decode, published by a foreign client: each costs itself
(dead-lettered with a reason) and the consumer keeps its connection.

Before: aiormq closed the whole connection on the first such frame; the broker gave the same
message to the reconnected consumer, for ever on a classic queue.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiormq
import pytest
from pamqp import commands
from pamqp.commands import Basic

from tests.conftest import AMQP_URL
from tests.contract.backends import Backend
from tests.integration.test_rmq_bad_input import publish, routed_config
from tests.processors import completions

PLACEHOLDER = datetime(2000, 1, 1, tzinfo=UTC)
PACKED = struct.pack(">Q", int(PLACEHOLDER.timestamp()))


def crafted(old: bytes, new: bytes, **fields: Any) -> Basic.Properties:
    """Properties whose encoding has ``old`` replaced by ``new`` (what pamqp will not write)."""

    class Crafted(Basic.Properties):
        def marshal(self) -> bytes:
            raw = super().marshal()
            assert raw.count(old) == 1
            return raw.replace(old, new)

    return Crafted(delivery_mode=2, **fields)


POISON: list[tuple[Callable[[], Basic.Properties], str]] = [  # properties, reason
    (lambda: crafted(PACKED, b"\xff" * 8, message_id="p-stamp", message_type="demo",
                     timestamp=PLACEHOLDER),
     "MalformedJob: timestamp 18446744073709551615 is out of range"),
    (lambda: crafted(b"KINDKIND", b"\xff" * 8, message_id="p-kind", message_type="KINDKIND"),
     "MalformedJob: type (the job kind) is not UTF-8 (invalid start byte at byte 0: "
     "b'\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff')"),
    (lambda: crafted(b"\x04KEYX", b"\x04\xff\xfeKX", message_id="p-name", message_type="demo",
                     headers={"KEYX": "v"}),
     "MalformedJob: headers cannot be decoded: a header name is not UTF-8 (b'\\xff\\xfeKX')"),
]
# Decodable now and valid: they run.
HARMLESS = [lambda: crafted(PACKED, b"\xff" * 8, message_id="p-header-stamp", message_type="demo",
                            headers={"sent": PLACEHOLDER})]


class CcRoutedPublish(commands.Basic.Publish):
    """A publish whose routing key is not UTF-8: a CC header routes it to the queue anyway."""

    def marshal(self) -> bytes:
        return super().marshal().replace(b"RKRK", b"\xff" * 4)


async def publish_poison(queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    connection = await aiormq.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        for make in [m for m, _ in POISON] + HARMLESS:
            await channel.basic_publish(b"{}", exchange="jobq", routing_key=queue, properties=make())
        with monkeypatch.context() as patch:
            patch.setattr(commands.Basic, "Publish", CcRoutedPublish)
            await channel.basic_publish(
                b"{}", exchange="jobq", routing_key="RKRK",
                properties=Basic.Properties(message_id="p-routed", message_type="demo",
                                            delivery_mode=2, headers={"CC": [queue]}))
    finally:
        await connection.close()


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_undecodable_frames_are_dead_lettered_and_the_connection_lives(
        rabbit: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queue_type: str) -> None:
    if queue_type == "classic":
        rabbit.cleanup()
        rabbit.set(RABBITMQ__QUEUE_TYPE="classic")
        assert rabbit.run("jobq", "init").returncode == 0
    rabbit.produce(2, "--kind", "demo")
    asyncio.run(publish_poison(rabbit.queue, monkeypatch))
    rabbit.produce(2, "--kind", "demo")
    result = rabbit.run("consumer", "--config", str(routed_config(tmp_path)), "--once", "-n", "2",
                        timeout=30)
    assert result.returncode == 0, result.stderr
    assert "lost the RabbitMQ session" not in result.stderr, result.stderr[-3000:]
    dead = {row["id"]: row["last_error"] for row in rabbit.dead()}
    assert dead == {make().message_id: reason for make, reason in POISON}
    done = completions(tmp_path)
    assert len(done) == 6 and {"p-routed", "p-header-stamp"} <= set(done)
    assert rabbit.waiting() == 0


def test_an_oversized_x_header_from_a_foreign_client_is_dead_not_retried(
        rabbit: Backend, tmp_path: Path) -> None:
    # Before: x- headers were not counted, the job ran and failed, and its retry copy (130 kB of
    # header plus the reason) went over frame_max: the broker closed the connection, again and
    # again.
    asyncio.run(publish(rabbit.queue, b"{}", "x-big", "loud", {"x-big": "y" * 130_000}))
    rabbit.produce(1, "--kind", "loud", "--max-attempts", "2")
    rabbit.set(RETRY__BASE_DELAY="0", RETRY__JITTER="false")
    result = rabbit.run("consumer", "--once", "-p", "tests.processors:fail_loudly", "-a", "size=10",
                        "-n", "1", timeout=30)
    assert result.returncode == 0, result.stderr
    assert "lost the RabbitMQ session" not in result.stderr, result.stderr[-3000:]
    dead = {row["id"]: row["last_error"] for row in rabbit.dead()}
    assert dead.pop("x-big") == ("MalformedJob: headers are 130,013 bytes as JSON, over the limit "
                                 "of 65,536 (limits.max_headers)")
    assert [reason.endswith("(gave up after 2 of 2 attempts)") for reason in dead.values()] == [True]
