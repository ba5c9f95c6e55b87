"""The RabbitMQ twin of test_observability_postgres: a real consumer on the real broker,
watched through /metrics and `jobq stats`; the counters move with processed, retried and dead
jobs, and the depth it reports is what the broker holds (rabbitmqctl)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, cli_env, need_tool, run_cli, start_cli
from tests.scrape import Running, get, scrape, value, wait_for
from tools.stack.cleanup import drop_rabbit, owned

pytestmark = pytest.mark.integration
STATES = ("ready", "dead", "retry")  # what RabbitAdmin.depth() counts (unacked: None over AMQP)


def rmq_args(queue: str) -> list[str]:
    return ["--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--queue", queue]


def rmq_env(queue: str, **extra: str) -> dict[str, str]:
    """The queue's own exchange too, so cleanup removes only what the test declared."""
    return cli_env(JOBQ_RABBITMQ__EXCHANGE=queue, **extra)


@pytest.fixture
def rabbit_queue(amqp_url: str, queue_name: str) -> Iterator[str]:
    """A declared topology for a fresh queue, deleted afterwards."""
    done = run_cli("jobq", "init", *rmq_args(queue_name), env=rmq_env(queue_name))
    assert done.returncode == 0, done.stderr
    yield queue_name
    drop_rabbit(amqp_url, queue_name)


def broker_depth(queue: str) -> dict[str, int]:
    """ready/unacked of the work queue, messages in the dead queue and the retry tiers,
    straight from the broker (independent of jobq's admin)."""
    out = subprocess.run([need_tool("rabbitmqctl", "rabbitmq-server"), "list_queues", "--quiet",
                          "--no-table-headers", "name", "messages_ready",
                          "messages_unacknowledged"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    rows = {name: (int(ready), int(unacked)) for name, ready, unacked in
            (line.split() for line in out.splitlines() if line.strip())}
    mine = owned(list(rows), queue)
    return {"ready": rows[queue][0], "unacked": rows[queue][1],
            "dead": sum(sum(rows[n]) for n in mine if n.endswith(".dead")),
            "retry": sum(sum(rows[n]) for n in mine if ".retry." in n)}


def produce(queue: str, kind: str, count: int) -> None:
    done = run_cli("producer", *rmq_args(queue), "--kind", kind, "--count", str(count),
                   env=rmq_env(queue))
    assert done.returncode == 0, done.stderr


def stats_json(queue: str) -> dict[str, Any]:
    done = run_cli("jobq", "stats", *rmq_args(queue), "--json", env=rmq_env(queue))
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.mark.slow
def test_counters_and_depth_follow_the_jobs(rabbit_queue: str) -> None:
    queue = rabbit_queue
    # One job at a time and no buffer: prefetch 1, so a held job leaves the rest ready.
    running = Running(start_cli("consumer", *rmq_args(queue), "--metrics-port", "0",
                                "--processor", "tests.scripted:by_kind", "--concurrency", "1",
                                "--shutdown-timeout", "0.5", "--log-format", "json",
                                env=rmq_env(queue, JOBQ_CONSUMER__BUFFER="0",
                                            JOBQ_METRICS__DEPTH_INTERVAL="0.2")))
    labels = {"transport": "rabbitmq", "queue": queue}
    try:
        wait_for(lambda: get(f"{running.base}/readyz")[0] == 200, 15, "/readyz")
        produce(queue, "ok", 20)
        produce(queue, "flaky", 5)
        produce(queue, "bad", 3)

        def settled() -> bool:
            m = scrape(running.base)
            return [value(m, "jobq_jobs_total", outcome=o, **labels)
                    for o in ("ok", "retried", "dead")] == [25, 5, 3]

        wait_for(settled, 30, "25 ok, 5 retried, 3 dead")
        m = scrape(running.base)
        assert value(m, "jobq_job_errors_total", error="Retry", **labels) == 5
        assert value(m, "jobq_job_errors_total", error="PermanentError", **labels) == 3
        assert value(m, "jobq_job_latency_seconds_count", **labels) == 25
        assert value(m, "jobq_redeliveries_total", **labels) == 5

        produce(queue, "hold", 1)  # taken, and held unacked until the consumer stops
        produce(queue, "ok", 7)    # prefetch 1: these stay ready
        truth = {"ready": 7, "dead": 3, "retry": 0}
        wait_for(lambda: {s: value(scrape(running.base), "jobq_queue_depth", state=s, **labels)
                          for s in STATES} == truth, 15, f"depth gauges {truth}")
        # rabbitmqctl's counts lag by up to the broker's stats interval (5 s by default).
        wait_for(lambda: broker_depth(queue) == {**truth, "unacked": 1}, 15, "the broker's counts",
                 interval=1)
        assert value(scrape(running.base), "jobq_in_flight", **labels) == 1  # the broker's unacked
        assert stats_json(queue)["depth"] == {**truth, "unacked": None}
    finally:
        code = running.stop()
    assert code == 0, "".join(running.lines)
