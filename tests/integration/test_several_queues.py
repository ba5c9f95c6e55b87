"""One consumer, several queues (``--queues a=2,b=3``): each queue its own pool and share of
concurrency, on both backends, stopped together, counted apart."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import consuming, init_queue, wait_until
from tests.contract.backends import Backend, backend_under_test
from tests.processors import lines

SHARES = {"a": 2, "b": 3}
JOBS = 6  # per queue: more than either share, so a share is all that holds a queue back


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-quorum"])
def queues(request: pytest.FixtureRequest, queue_name: str) -> Iterator[dict[str, Backend]]:
    """The backend on two queues of this test's, ``a`` and ``b``."""
    with backend_under_test(request, f"{queue_name}-a", request.param) as a:
        b = Backend(a.transport, f"{queue_name}-b", dict(a.env), schema=a.schema)
        if a.transport == "rabbitmq":
            init_queue("rabbitmq", b.queue, b.env)
        try:
            yield {"a": a, "b": b}
        finally:
            if a.transport == "rabbitmq":
                b.cleanup()


def held(directory: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split()) for line in lines(directory, "held")  # type: ignore[misc]
            if len(line.split()) == 3]


def most_at_once(events: list[tuple[str, str, str]], queue: str) -> int:
    running = most = 0
    for event, name, _ in events:  # in the order one process wrote them
        if name == queue:
            running += 1 if event == "start" else -1
            most = max(most, running)
    return most


def test_each_queue_runs_within_its_own_share_and_all_end_together(
        queues: dict[str, Backend], tmp_path: Path) -> None:
    a, b = queues["a"], queues["b"]
    for backend in (a, b):
        backend.produce(JOBS)
    gate, record, summary = tmp_path / "gate", tmp_path / "held", tmp_path / "stats.json"
    shares = ",".join(f"{backend.queue}={SHARES[name]}" for name, backend in queues.items())
    consumer = a.start("consumer", "--queues", shares, "-p", "tests.processors:held",
                       "-a", f"directory={record}", "-a", f"gate={gate}",
                       "--stats-json", str(summary))
    try:
        stderr = consuming(consumer)
        for name, backend in queues.items():
            stderr.wait_for(re.escape(f"consuming queue {backend.queue!r} on {a.transport} "
                                      f"(concurrency {SHARES[name]},"), 30)
        # Each queue fills its share and no more while every job is held.
        assert wait_until(lambda: [sum(1 for e, q, _ in held(record) if e == "start" and q == x)
                                   for x in (a.queue, b.queue)] == [2, 3], 30), held(record)
        gate.touch()
        assert wait_until(lambda: sum(1 for e, _, _ in held(record) if e == "end") == 2 * JOBS,
                          30), held(record)
    finally:
        consumer.send_signal(signal.SIGTERM)
        code = consumer.wait(timeout=30)
    assert code == 0, stderr.text()
    events = held(record)
    assert most_at_once(events, a.queue) == 2 and most_at_once(events, b.queue) == 3, events
    counts = json.loads(summary.read_text())
    assert counts["ok"] == 2 * JOBS, counts
    assert {q: c["ok"] for q, c in counts["queues"].items()} == {a.queue: JOBS, b.queue: JOBS}
    assert a.waiting() == 0 and b.waiting() == 0
