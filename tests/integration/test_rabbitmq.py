"""The RabbitMQ consumer against the real broker, driven through the real CLIs.

Each test declares its own queue (and removes it). One test restarts the broker's app: it is
kept short and always starts the app again.
"""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
from pathlib import Path

import aio_pika
import pytest

from tests.conftest import AMQP_URL, Stderr, cli_env
from tests.contract.backends import Backend, publish_raw
from tests.contract.story import events
from tests.contract.test_contract import by_event, consumer_args, stop, wait_for
from tests.processors import completions

RECORD = "tests.processors:record"


def record_args(directory: Path, *extra: str) -> list[str]:
    return ["--processor", RECORD, "-a", f"directory={directory}", *extra]


def tally(directory: Path) -> tuple[int, int]:
    """(distinct jobs completed, duplicate completions)."""
    done = completions(directory)
    counts = collections.Counter(done)
    return len(counts), len(done) - len(counts)


def test_three_consumers_drain_5000_without_loss(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(5000)
    consumers = [rabbit.start("consumer", "--once", *record_args(tmp_path)) for _ in range(3)]
    codes = [c.wait(timeout=60) for c in consumers]

    assert codes == [0, 0, 0], [c.stderr.read() if c.stderr else "" for c in consumers]
    distinct, duplicates = tally(tmp_path)
    print(f"three consumers: {distinct} distinct jobs, {duplicates} duplicates")
    assert distinct == 5000
    assert duplicates == 0  # no crash, so no redelivery
    assert rabbit.waiting() == 0


def test_kill_9_mid_flight_loses_nothing(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(1000)
    victim = rabbit.start("consumer", "--concurrency", "10",
                          *record_args(tmp_path, "-a", "sleep_ms=20"))
    try:
        assert wait_for(lambda: tally(tmp_path)[0] >= 100, 30)
    finally:
        victim.kill()
        victim.wait()
    before, _ = tally(tmp_path)
    assert before < 1000, "the victim finished everything before it was killed"

    rescuer = rabbit.run("consumer", "--once", *record_args(tmp_path))

    assert rescuer.returncode == 0, rescuer.stderr
    distinct, duplicates = tally(tmp_path)
    print(f"kill -9: {distinct} distinct jobs, {duplicates} duplicates (at most its prefetch)")
    assert distinct == 1000
    assert duplicates <= 20  # the victim's prefetch: done but not yet acked


def test_crash_redeliveries_count_and_end_dead(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(1, "--kind", "crash", "--max-attempts", "2")
    story = consumer_args(tmp_path)
    # The first crash is refunded (it cannot be told from a batch-mate's); then it runs alone
    # and each crash counts: max_attempts runs of its own.
    for _ in range(3):
        crashed = rabbit.run("consumer", "--once", *story)
        assert crashed.returncode == 137, crashed.stderr

    last = rabbit.run("consumer", "--once", *story)

    assert last.returncode == 0, last.stderr
    assert [r["attempt"] for r in by_event(events(tmp_path), "start")] == [1, 1, 2]
    (dead,) = rabbit.dead()
    assert dead["attempts"] == 2 and "lost mid-job" in dead["last_error"]


def test_retry_hops_through_the_tiers_to_its_exact_delay(rabbit: Backend, tmp_path: Path) -> None:
    # The story asks for 1 s: two hops of the 0.5 s tier. Before, the 2 s tier (rounded up).
    rabbit.set(RABBITMQ__RETRY_TIERS="[0.5, 2]")
    rabbit.produce(1, "--kind", "retry")
    consumer = rabbit.start("consumer", *consumer_args(tmp_path))
    try:
        assert wait_for(lambda: by_event(events(tmp_path), "ok"), 20)
    finally:
        code, err = stop(consumer)
    assert code == 0, err
    fail, again = by_event(events(tmp_path), "fail")[0], by_event(events(tmp_path), "start")[1]
    assert 1.0 <= again["t"] - fail["t"] < 1.5


def test_dead_list_requeue_and_purge(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.produce(2, "--kind", "fail")
    rabbit.produce(1, "--kind", "flaky", "--max-attempts", "1")
    assert rabbit.run("consumer", "--once", *consumer_args(tmp_path)).returncode == 0
    dead = rabbit.dead()
    assert sorted(d["kind"] for d in dead) == ["fail", "fail", "flaky"]
    first = next(d["id"] for d in dead if d["kind"] == "fail")

    requeued = rabbit.run("jobq", "dead", "requeue", "--id", first)
    unknown = rabbit.run("jobq", "dead", "purge", "--id", "12345")
    purged = rabbit.run("jobq", "dead", "purge", "--kind", "flaky")

    assert requeued.returncode == 0 and f"requeued 1 dead jobs: {first}" in requeued.stdout
    assert unknown.returncode == 1 and "no dead job 12345" in unknown.stderr
    assert purged.returncode == 0 and "purged 1 dead jobs" in purged.stdout
    assert [d["kind"] for d in rabbit.dead()] == ["fail"]
    assert rabbit.waiting() == 1  # the requeued one, attempts reset


def test_malformed_bodies_of_every_kind_are_dead_lettered(rabbit: Backend, tmp_path: Path) -> None:
    # (aiormq gives every message a message_id, so "no id" is covered by the codec's unit test)
    # (without a type: test_rmq_foreign_producer.py and the codec's unit tests)
    bad = [(b"{not json", "1", "ok"), (b'"text"', "2", "ok"), (b'{"a": 1}', "3", "k" * 201)]
    for body, message_id, kind in bad:
        asyncio.run(publish_raw(rabbit.queue, body, message_id=message_id, kind=kind))
    done = rabbit.run("consumer", "--once", *consumer_args(tmp_path))
    assert done.returncode == 0, done.stderr
    reasons = sorted(d["last_error"] for d in rabbit.dead())
    assert len(reasons) == 3 and all(r.startswith("MalformedJob: ") for r in reasons)
    assert any("body is not JSON" in r or "body is not UTF-8" in r for r in reasons)
    assert any("not a JSON object (got str)" in r for r in reasons)
    assert any("kind is longer than 200 characters" in r for r in reasons)
    assert events(tmp_path) == []


def test_declaring_against_different_arguments_says_what_and_how(rabbit: Backend) -> None:
    rabbit.set(RABBITMQ__QUEUE_TYPE="classic")
    result = rabbit.run("jobq", "init")
    assert result.returncode == 2
    assert "x-queue-type" in result.stderr and "rabbitmq.queue_type" in result.stderr
    assert "'quorum'" in result.stderr and "delete_queue" in result.stderr


def test_unreachable_broker_exits_3_naming_host_not_password(tmp_path: Path) -> None:
    backend = Backend("rabbitmq", "unreachable", {
        **cli_env(), "JOBQ_AMQP_URL": "amqp://guest:s3cret@127.0.0.1:1/",
        "JOBQ_CONNECT__ATTEMPTS": "3", "JOBQ_CONNECT__BACKOFF_BASE": "0.01"})
    result = backend.run("consumer", "--once", "-p", "noop", timeout=30)
    assert result.returncode == 3
    assert "s3cret" not in result.stderr
    tries = [line for line in result.stderr.splitlines() if "cannot reach RabbitMQ at 127.0.0.1:1" in line]
    assert len(tries) == 3  # two warnings, then the error


@pytest.mark.serial  # restarts the broker's app: every other RabbitMQ test running then would fail
def test_broker_restart_mid_run_recovers_by_itself(rabbit: Backend, tmp_path: Path) -> None:
    rabbit.set(CONNECT__BACKOFF_MAX="1.0")
    rabbit.produce(5000)
    consumer = rabbit.start("consumer", "--concurrency", "20",
                            *record_args(tmp_path, "-a", "sleep_ms=20"))
    try:
        assert wait_for(lambda: tally(tmp_path)[0] >= 500, 30)
        try:
            subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True, timeout=60)
        finally:
            subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True, timeout=120)
        assert wait_for(lambda: tally(tmp_path)[0] >= 5000, 60), tally(tmp_path)
    finally:
        code, err = stop(consumer)
    assert code == 0, err
    distinct, duplicates = tally(tmp_path)
    dead = rabbit.dead()
    print(f"broker restart: {distinct} distinct done, {len(dead)} dead, {duplicates} duplicates")
    assert distinct + len(dead) == 5000 and distinct == 5000
    assert "lost the RabbitMQ session" in err
    assert err.count("consuming ") >= 2, err


def test_stats_json_shape_matches_postgres(rabbit: Backend) -> None:
    rabbit.produce(3)
    result = rabbit.run("jobq", "stats", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["oldest_pending_seconds"] is None  # AMQP cannot peek without a delivery
    assert data["depth"] == {"ready": 3, "unacked": None, "dead": 0, "retry": 0}


def test_a_consumer_cancelled_by_the_broker_subscribes_again(rabbit: Backend, tmp_path: Path) -> None:
    consumer = rabbit.start("consumer", *record_args(tmp_path))
    err = Stderr(consumer)
    try:
        rabbit.produce(5)
        assert wait_for(lambda: tally(tmp_path)[0] == 5, 20)
        asyncio.run(delete_queue(rabbit.queue))  # the broker cancels every consumer of it
        # The consumer has heard of the cancel before the next jobs come: they reach it through
        # the subscription it makes again, not through the one the broker just cancelled.
        err.wait_for(r"consumer cancelled by the broker", 20)
        rabbit.produce(5)  # the producer declares the queue too; the consumer is back on it
        assert wait_for(lambda: tally(tmp_path)[0] == 10, 20), tally(tmp_path)
    finally:
        code, _ = stop(consumer)
    assert code == 0, err.text()


async def delete_queue(name: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)
