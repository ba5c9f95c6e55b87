"""Bad input and overload on the real RabbitMQ: each bad message ends dead with a reason naming the
problem and the consumer goes on; enqueue refuses what breaks the limits; a full queue
(x-max-length, reject-publish) makes enqueue raise QueueFull after its timeout."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from jobq.api import connect_publisher
from jobq.config import Settings, load_settings
from jobq.core.errors import JobTooLarge, MalformedJob, QueueFull
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.publisher import RabbitPublisher
from tests.conftest import AMQP_URL, ROOT, run_cli, until
from tests.contract.backends import Backend
from tests.integration.test_pg_bad_input import DEEP
from tests.processors import completions

RECORD = "tests.processors:record"
BAD = [  # (body, message_id, type, headers, the reason it must be dead-lettered with)
    (b"{not json", "b1", "demo", {},
     "MalformedJob: body is not JSON (Expecting property name enclosed in double quotes: line 1 "
     "column 2 (char 1))"),
    (b"\xff\xfe{}", "b2", "demo", {}, "MalformedJob: body is not UTF-8 (invalid start byte at byte 0)"),
    (b"[1, 2]", "b3", "demo", {}, "MalformedJob: body is not a JSON object (got list)"),
    (('{"a": ' + DEEP + "}").encode(), "b4", "demo", {},
     "MalformedJob: body is nested too deeply to decode"),
    (b"{}", "b5", "k" * 201, {}, "MalformedJob: kind is longer than 200 characters"),
    (b"{}", "b6", "demo", {"x-jobq-attempt": "3"},
     "MalformedJob: header x-jobq-attempt is not an integer >= 1 (got str '3')"),
    (json.dumps({"pad": "x" * 8000}).encode(), "b7", "demo", {},
     "MalformedJob: body is 8,011 bytes as JSON, over the limit of 7,000 (limits.max_payload)"),
    (b"{}", "b8", "demo", {"h": "x" * 100_000},
     "MalformedJob: headers are 100,009 bytes as JSON, over the limit of 65,536 (limits.max_headers)"),
    # Issue 37: jobq's own headers of a wrong type or range were ignored (a due time that could
    # not be read ran the job at once) or ran a job as attempt 0.
    (b"{}", "b10", "demo", {"x-jobq-due": "1700000000000"},
     "MalformedJob: header x-jobq-due is not an integer, epoch milliseconds (got str '1700000000000')"),
    (b"{}", "b11", "demo", {"x-jobq-due": 2**62},
     f"MalformedJob: header x-jobq-due is out of range ({2**62}: years 1 to 9999 only)"),
    (b"{}", "b12", "demo", {"x-jobq-attempt": 0},
     "MalformedJob: header x-jobq-attempt is not an integer >= 1 (got int 0)"),
    (b"{}", "b13", "demo", {"x-jobq-enqueued-at": "yesterday"},
     "MalformedJob: header x-jobq-enqueued-at is not an integer, epoch milliseconds (got str "
     "'yesterday')"),
    (b"{}", "b9", "mystery", {},
     "UnknownKind: no processor for kind 'mystery' (known kinds: demo; no default processor)"),
]


async def publish(queue: str, body: bytes, message_id: str, kind: str | None,
                  headers: dict[str, Any]) -> None:
    """Publish bytes to a jobq queue by hand, as a foreign or broken producer would."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange("jobq")
        await exchange.publish(aio_pika.Message(body, message_id=message_id, type=kind, headers=headers,
                                                delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                               routing_key=queue)


def routed_config(tmp_path: Path) -> Path:
    path = tmp_path / "routed.yaml"
    path.write_text(f"extends: {ROOT / 'configs' / 'rabbitmq.yaml'}\n"
                    "consumer:\n  processor: ''\n  processors:\n"
                    f"    demo: {{processor: '{RECORD}', args: {{directory: '{tmp_path}'}}}}\n")
    return path


def test_every_bad_message_is_dead_lettered_with_its_reason_and_the_good_ones_run(
        rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(3, "--kind", "demo")
    for body, message_id, kind, headers, _ in BAD:
        asyncio.run(publish(rabbit.queue, body, message_id, kind, headers))
    rabbit.produce(3, "--kind", "demo")
    rabbit.set(LIMITS__MAX_PAYLOAD="7000")
    result = rabbit.run("consumer", "--config", str(routed_config(tmp_path)), "--once", "-n", "2")
    assert result.returncode == 0, result.stderr
    dead = {row["id"]: row["last_error"] for row in rabbit.dead()}
    assert dead == {message_id: reason for _, message_id, _, _, reason in BAD}
    assert len(completions(tmp_path)) == 6  # the good ones, before and after the bad ones
    assert rabbit.waiting() == 0


def bounded(queue: str, max_pending: int, queue_type: str) -> Settings:
    return load_settings(ROOT / "configs" / "rabbitmq.yaml", {
        "rabbitmq.url": AMQP_URL, "queue": queue, "limits.max_pending": max_pending,
        "rabbitmq.queue_type": queue_type}, env={})


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_full_queue_refuses_with_a_negative_confirm_then_queue_full(
        amqp_url: str, queue_name: str, queue_type: str) -> None:
    backend = Backend("rabbitmq", queue_name, {})  # for cleanup only

    async def go() -> tuple[list[str], list[str], QueueFull, float, str, int]:
        async with connect_publisher(bounded(queue_name, 5, queue_type)) as publisher:
            assert isinstance(publisher, RabbitPublisher)
            refusals = counted_refusals(publisher)
            accepted = [await publisher.enqueue(NewJob(kind="k", payload={"n": i}), timeout=0.1)
                        for i in range(5)]
            with pytest.raises(QueueFull) as full:  # one at a time: no publishes in flight at once
                for i in range(5, 8):
                    accepted.append(await publisher.enqueue(NewJob(kind="k", payload={"n": i}),
                                                            timeout=0.1))
            started = time.monotonic()
            with pytest.raises(QueueFull):
                await publisher.enqueue(NewJob(kind="k"), timeout=0.4)
            waited = time.monotonic() - started
            # It waits for room, which a consumer makes meanwhile. Quorum queues take publishes
            # again only once below 80 % of the limit (rabbit_fifo's low watermark): take three.
            refused_before = len(refusals)
            waiting = asyncio.ensure_future(publisher.enqueue(NewJob(kind="k"), timeout=5))
            # Refused for want of room and waiting on: only then is the room made.
            await until(lambda: len(refusals) > refused_before or waiting.done(),
                        "the waiting enqueue's first refusal", 5)
            assert not waiting.done()
            taken = await take(queue_name, 3)
            late = await waiting
            return accepted, taken, full.value, waited, late, await ready(queue_name)

    try:
        accepted, taken, full, waited, late, left = asyncio.run(go())
    finally:
        backend.cleanup()
    # Classic queues refuse at exactly max_pending. Quorum queues check after appending, so the
    # message that crosses the limit gets in (and publishes in flight together can overshoot).
    assert len(accepted) == (5 if queue_type == "classic" else 6), full
    assert str(full) == (f"queue {queue_name!r} is full: 5 jobs ready (limits.max_pending), "
                         "no room for 1 more within 0.1s")
    assert waited >= 0.4 and late and set(taken) <= set(accepted)
    assert left == len(accepted) - 3 + 1  # nothing accepted was dropped


def counted_refusals(publisher: RabbitPublisher) -> list[int]:
    """How many jobs each try of ``publisher`` had refused by the full queue, one entry per
    such try, as they come (its tries wrapped): a wait sees an enqueue has found no room."""
    refusals: list[int] = []
    real = publisher._round

    async def counted(*args: Any) -> Any:
        outcome = await real(*args)
        if outcome.refused:
            refusals.append(len(outcome.refused))
        return outcome

    publisher._round = counted  # type: ignore[method-assign, assignment]
    return refusals


async def take(queue: str, count: int) -> list[str]:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        q = await channel.get_queue(queue, ensure=False)
        ids = []
        for _ in range(count):
            message = await q.get(timeout=5)
            await message.ack()
            ids.append(str(message.message_id))
        return ids


async def ready(queue: str) -> int:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, passive=True)
        return int(q.declaration_result.message_count or 0)


def test_enqueue_refuses_what_breaks_the_limits_and_publishes_nothing(rabbit: Backend) -> None:
    settings = load_settings(ROOT / "configs" / "rabbitmq.yaml", {
        "rabbitmq.url": AMQP_URL, "queue": rabbit.queue}, env={})

    async def attempt() -> None:
        async with connect_publisher(settings) as publisher:
            for job, error, words in [
                (NewJob(kind="k", payload={"pad": "x" * 1_048_576}), JobTooLarge, "limits.max_payload"),
                (NewJob(kind="k", headers={"h": "x" * 70_000}), JobTooLarge, "limits.max_headers"),
                (NewJob(kind="", payload={}), MalformedJob, "kind is empty"),
            ]:
                with pytest.raises(error, match=words):
                    await publisher.enqueue_many([NewJob(kind="fine"), job])

    asyncio.run(attempt())
    assert asyncio.run(ready(rabbit.queue)) == 0
    made = rabbit.run("producer", "--count", "1", "--payload-size", "2000000")
    assert made.returncode == 2 and "jobq: job refused: payload is 2,000,019 bytes" in made.stderr


def test_a_batch_into_a_full_classic_queue_reports_what_got_in(rabbit: Backend) -> None:
    async def go() -> QueueFull:
        async with connect_publisher(bounded(rabbit.queue + "-b", 5, "classic")) as publisher:
            with pytest.raises(QueueFull) as full:
                await publisher.enqueue_many([NewJob(kind="k", payload={"n": i}) for i in range(8)],
                                             timeout=0.2)
            return full.value

    try:
        full = asyncio.run(go())
        assert len(full.accepted) == 5 and asyncio.run(ready(rabbit.queue + "-b")) == 5
        bounded_env = {**rabbit.env, "JOBQ_LIMITS__MAX_PENDING": "5", "JOBQ_RABBITMQ__QUEUE_TYPE": "classic",
                       "JOBQ_LIMITS__ENQUEUE_TIMEOUT": "0.2"}
        made = run_cli("producer", "--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--queue",
                       rabbit.queue + "-b", "--count", "1", env=bounded_env)
        assert made.returncode == 4 and "is full" in made.stderr, made.stderr
    finally:
        Backend("rabbitmq", rabbit.queue + "-b", {}).cleanup()
    # Turning the limit on for a queue declared without it: a config error saying what to do.
    rabbit.set(LIMITS__MAX_PENDING="100")
    made = rabbit.run("producer", "--count", "1")
    assert made.returncode == 2 and "limits.max_pending" in made.stderr and "x-max-length" in made.stderr


def test_huge_errors_and_near_frame_size_headers_never_cost_the_connection(
        rabbit: Backend, tmp_path: Path) -> None:
    # Before: a 300,000-character error went into the retry copy's headers, the broker closed
    # the connection (FRAME_ERROR, frame_too_large) and every in-flight job of the consumer
    # was redelivered; the job itself ended dead for "lost mid-job", its real error lost.
    rabbit.produce(2, "--kind", "loud", "--max-attempts", "2")
    asyncio.run(publish(rabbit.queue, b"{}", "big-headers", "demo", {"h": "y" * 130_900}))
    rabbit.set(RETRY__BASE_DELAY="0", RETRY__JITTER="false")
    result = rabbit.run("consumer", "--once", "-p", "tests.processors:fail_loudly", "-a", "size=300000",
                     "-n", "1")
    assert result.returncode == 0, result.stderr
    assert "lost the RabbitMQ session" not in result.stderr, result.stderr[-3000:]
    dead = {row["id"]: row["last_error"] for row in rabbit.dead()}
    assert len(dead) == 3
    assert dead.pop("big-headers").startswith("MalformedJob: headers are 130,909 bytes as JSON")
    for reason in dead.values():
        assert reason.startswith("ValueError: xxxx") and reason.endswith(
            "... (300,000 characters) (gave up after 2 of 2 attempts)")


def test_a_history_header_another_client_broke_is_kept_readable_and_never_stalls_a_job(
        rabbit: Backend) -> None:
    # Before: the settle parsed the header outside its cleanup, so an attempt of 1e400 raised
    # OverflowError there: the retry never went out, the delivery was never counted back.
    broken = json.dumps([{"attempt": 1e400, "at": "2026-01-01T00:00:00+00:00"}, "\ud800"])
    asyncio.run(publish(rabbit.queue, b"{}", "broken-history", "loud",
                        {"x-jobq-errors": broken, "x-jobq-max-attempts": 2}))
    rabbit.set(RETRY__BASE_DELAY="0", RETRY__JITTER="false")
    result = rabbit.run("consumer", "--once", "-p", "tests.processors:fail_loudly", "-a", "size=20")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "failed unexpectedly" not in result.stderr, result.stderr[-3000:]
    shown = json.loads(rabbit.run("jobq", "jobs", "show", "broken-history", "--json").stdout)
    assert shown["state"] == "dead"
    assert [(e["attempt"], e["type"]) for e in shown["errors"]] == [
        (0, "?"), (0, "?"), (1, "ValueError"), (2, "ValueError")], shown["errors"]
