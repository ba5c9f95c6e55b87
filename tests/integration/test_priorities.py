"""NewJob.priority against the real servers: a due job of a higher priority runs first.

PostgreSQL in both claim modes and RabbitMQ with a classic queue and rabbitmq.max_priority:
jobs enqueued with no priority, then with priorities, are run by one worker (nothing
buffered) highest priority first, enqueue order within a priority, then the rest in their
order. Where priorities cannot hold, the refusal names the key and nothing is enqueued.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import schema_env
from tests.contract.backends import Backend, backend_under_test
from tests.processors import completions

ONE = {"JOBQ_CONSUMER__BUFFER": "0"}
PLAN = [(0, 5), (3, 2), (7, 2), (3, 1), (9, 1)]  # (priority, jobs), enqueued in this order


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-classic"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """The backend under test, one job at a time; on RabbitMQ a classic queue with priorities."""
    with backend_under_test(request, queue_name, request.param, ONE,
                            {"JOBQ_RABBITMQ__MAX_PRIORITY": "9"}) as backend:
        yield backend

def test_higher_priorities_run_first(backend: Backend, tmp_path: Path) -> None:
    for priority, count in PLAN:
        backend.produce(count, "--kind", f"p{priority}", "--priority", str(priority))
    result = backend.run("consumer", "--once", "-n", "1", "-p", "tests.processors:kinds",
                         "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    expected = ["p9"] + ["p7"] * 2 + ["p3"] * 3 + ["p0"] * 5
    assert completions(tmp_path) == expected


def test_where_priorities_cannot_hold_the_refusal_names_the_key(queue_name: str,
                                                               amqp_url: str) -> None:
    quorum = Backend("rabbitmq", queue_name, schema_env("unused", JOBQ_RABBITMQ__MAX_PRIORITY="5"))
    result = quorum.run("jobq", "init")
    assert result.returncode == 2, result.stderr
    assert "rabbitmq.max_priority" in result.stderr and "classic" in result.stderr
    plain = Backend("rabbitmq", queue_name, schema_env("unused"))
    try:
        assert plain.run("jobq", "init").returncode == 0
        result = plain.run("producer", "--count", "3", "--priority", "2")
        assert result.returncode == 2, result.stderr
        assert "rabbitmq.max_priority" in result.stderr and "nothing was enqueued" in result.stderr
        assert plain.waiting() == 0
        result = plain.run("producer", "--count", "1", "--priority", "12")
        assert result.returncode == 2 and "0-9" in result.stderr
    finally:
        plain.cleanup()
