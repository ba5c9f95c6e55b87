"""The depth poller, the summary line, JSON logs and the `jobq stats` table (no server)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from jobq.core.errors import ConnectionLost
from jobq.core.port import Depth
from jobq.observability.logs import configure
from jobq.observability.metrics import Metrics
from jobq.observability.monitor import Monitor, render_depth
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """configure() replaces the jobq logger's handlers; put the test runner's back."""
    root = logging.getLogger("jobq")
    saved = (root.handlers[:], root.level, root.propagate)
    yield
    root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def idle_pool() -> WorkerPool:
    async def handler(job: Any) -> None:
        return None

    return WorkerPool(MemoryTransport(MemoryStore()), handler, RetryPolicy(), concurrency=1,
                      buffer_size=0, job_timeout=1.0, shutdown_timeout=1.0)


class Probe:
    """A fake ``admin.depth`` that answers from a list, raising the exceptions in it."""

    def __init__(self, *answers: Depth | Mapping[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"transport": "postgres", "queue": "q", **labels})


async def test_poller_sets_depth_and_counts_failures(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics("postgres", "q")
    probe = Probe(Depth(depth={"pending": 7, "running": 1, "dead": 2}, oldest_pending_seconds=4.5),
                  ConnectionLost("down"), ConnectionLost("still down"),
                  Depth(depth={"pending": 0, "running": 0, "dead": 2}, oldest_pending_seconds=None))
    monitor = Monitor(idle_pool(), metrics=metrics, probe=probe, depth_interval=0.01,
                      summary_interval=0)
    await monitor.poll()
    assert gauge(metrics, "jobq_queue_depth", state="pending") == 7
    assert gauge(metrics, "jobq_queue_depth", state="dead") == 2
    assert gauge(metrics, "jobq_queue_oldest_pending_seconds") == 4.5
    with caplog.at_level(logging.DEBUG, logger="jobq.monitor"):
        await monitor.poll()
        await monitor.poll()
    assert gauge(metrics, "jobq_depth_poll_errors_total") == 2
    assert gauge(metrics, "jobq_queue_depth", state="pending") == 7  # last known value kept
    # One warning per failure streak, not one per poll.
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG]
    await monitor.poll()
    assert gauge(metrics, "jobq_queue_depth", state="pending") == 0
    assert gauge(metrics, "jobq_queue_oldest_pending_seconds") == 0


async def test_run_polls_on_its_interval() -> None:
    metrics = Metrics("postgres", "q")
    probe = Probe(Depth(depth={"pending": 1}, oldest_pending_seconds=0.1))
    monitor = Monitor(idle_pool(), metrics=metrics, probe=probe, depth_interval=0.02,
                      summary_interval=0)
    started = time.monotonic()
    monitor.start()
    await until(lambda: probe.calls >= 5, "five polls", 10)
    elapsed = time.monotonic() - started
    await monitor.stop()
    assert elapsed >= 4 * 0.02  # one interval apart at least (a slow machine only adds)


async def test_without_metrics_depth_is_polled_only_for_the_summary() -> None:
    probe = Probe(Depth(depth={"pending": 3}, oldest_pending_seconds=1.0))
    monitor = Monitor(idle_pool(), metrics=None, probe=probe, depth_interval=0.01,
                      summary_interval=0.1)
    started = time.monotonic()
    monitor.start()
    await until(lambda: probe.calls >= 3, "three polls", 10)
    elapsed = time.monotonic() - started
    await monitor.stop()
    assert elapsed >= 2 * 0.1  # one at the start, then one per summary, not every 0.01 s


def test_nothing_to_do_without_metrics_or_summary() -> None:
    monitor = Monitor(idle_pool(), metrics=None, probe=Probe(), depth_interval=1,
                      summary_interval=0)
    assert not monitor.needed


async def test_summary_line_in_json(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure("info", "json", transport="postgres", queue="q")
    pool = idle_pool()
    monitor = Monitor(pool, metrics=None, probe=Probe(Depth(depth={"pending": 12, "running": 2},
                                                             oldest_pending_seconds=3.25)),
                      depth_interval=1, summary_interval=30)
    mark = monitor.summary((0.0, 0, 0, 0))
    await monitor.poll()
    pool.stats.ok, pool.stats.retried, pool.stats.dead = 40, 3, 1
    monitor.summary(mark)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    last = lines[-1]
    assert last["event"] == "summary" and last["level"] == "info"
    assert (last["ok"], last["retried"], last["dead"]) == (40, 3, 1)
    assert last["depth"] == {"pending": 12, "running": 2}
    assert last["oldest_pending_seconds"] == 3.25
    assert last["rate"] > 0 and last["transport"] == "postgres" and last["queue"] == "q"
    assert "depth pending=12 running=2" in last["msg"]
    assert "depth" not in lines[0] and "depth unknown" in lines[0]["msg"]  # nothing polled yet


def test_json_log_lines_carry_job_fields_and_context(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure("debug", "json", transport="rabbitmq", queue="emails")
    logging.getLogger("jobq.pool").warning("job 7 failed", extra={"job_id": "7", "attempt": 2,
                                                                  "outcome": "retried"})
    line = json.loads(stream.getvalue())
    assert line == {**line, "level": "warning", "logger": "jobq.pool", "msg": "job 7 failed",
                    "job_id": "7", "attempt": 2, "outcome": "retried", "transport": "rabbitmq",
                    "queue": "emails"}


def test_stats_table() -> None:
    text = render_depth(Depth(depth={"pending": 12345, "running": 4, "dead": 0},
                              oldest_pending_seconds=81.25), transport="postgres", queue="q")
    assert text.splitlines() == [
        "queue 'q' on postgres",
        "state      jobs",
        "pending  12,345",
        "running       4",
        "dead          0",
        "oldest pending job: 81.2s old",
    ]
    empty = render_depth(Depth(depth={"ready": 0, "unacked": None}, oldest_pending_seconds=None),
                         transport="rabbitmq", queue="q")
    assert empty.splitlines()[2:] == ["ready       0", "unacked     -",
                                      "oldest pending job: none waiting"]


async def test_a_broken_probe_never_stops_the_monitor() -> None:
    metrics = Metrics("postgres", "q")
    probe = Probe(RuntimeError("a bug in a backend"), {"no depth": 1},
                  Depth(depth={"pending": 2}, oldest_pending_seconds=1.0))
    monitor = Monitor(idle_pool(), metrics=metrics, probe=probe, depth_interval=0.02,
                      summary_interval=0)
    monitor.start()
    # Polls run one after the other: once the fourth has begun, the first three are recorded.
    await until(lambda: probe.calls >= 4, "four polls", 10)
    await monitor.stop()
    assert gauge(metrics, "jobq_depth_poll_errors_total") == 2
    assert gauge(metrics, "jobq_queue_depth", state="pending") == 2


async def test_stopping_the_monitor_never_cuts_a_depth_poll_in_the_middle() -> None:
    # A cancelled AMQP RPC closes its channel (and at the wrong moment the connection the
    # consumer shares with its admin); a monitor stopped during its first poll waited for ever.
    cut: list[bool] = []
    polling, answer, answered = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def probe() -> Depth:
        polling.set()
        try:
            await answer.wait()
        except asyncio.CancelledError:
            cut.append(True)
            raise
        answered.set()
        return Depth(depth={"pending": 0})

    monitor = Monitor(idle_pool(), metrics=Metrics("memory", "q"), probe=probe,
                      depth_interval=0.01, summary_interval=0)
    monitor.start()
    await asyncio.wait_for(polling.wait(), 10)  # the first poll is under way
    await asyncio.wait_for(monitor.stop(), 10)  # returns while the poll waits for its answer
    assert not answered.is_set() and cut == []
    answer.set()  # the poll, left to run, ends with its answer: never cut
    await asyncio.wait_for(answered.wait(), 10)
    assert cut == []
