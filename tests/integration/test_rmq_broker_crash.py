"""A classic queue's backlog after a crash of the broker drains with the others, not alone.

A classic queue that recovers from a kill -9 of its node hands out every message it held as
redelivered, whether any consumer had it or not (RabbitMQ 3.10, queue index v1 and v2). jobq
took each for a crash redelivery and ran it alone: in the fault suite's classic run the
backlog left at the crash (about 20,000 jobs) drained at one job at a time per consumer, and
the run timed out. Now a first redelivery on a classic queue goes back to the work queue
marked and runs with the others; only a second one runs alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults import servers
from tests.contract.backends import Backend, backend_under_test
from tests.integration.test_rabbitmq import record_args, tally

pytestmark = pytest.mark.integration
JOBS = 300


@pytest.fixture
def classic(amqp_url: str, queue_name: str, request: pytest.FixtureRequest) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, "rabbitmq-classic") as backend:
        yield backend


@pytest.mark.serial  # kills the broker: every other RabbitMQ test running then would fail
def test_the_backlog_of_a_crashed_broker_runs_in_batches_not_alone(classic: Backend,
                                                                  tmp_path: Path) -> None:
    classic.produce(JOBS)
    try:
        servers.crash_rabbit()
    finally:
        servers.start_rabbit()
    started = time.monotonic()
    result = classic.run("consumer", "--once", "--concurrency", "16", "--log-level", "debug",
                         *record_args(tmp_path, "-a", "sleep_ms=20"))
    took = time.monotonic() - started
    print(f"{JOBS} jobs recovered after a broker crash drained in {took:.1f} s")
    assert result.returncode == 0, result.stderr[-3000:]
    assert tally(tmp_path) == (JOBS, 0)
    assert "it runs again alone" not in result.stderr, result.stderr[-3000:]
    # The broker did mark them redelivered (so the test tests something): each went through
    # the suspect step once.
    assert result.stderr.count("came back redelivered; it runs again") == JOBS, result.stderr[-3000:]
    assert classic.dead() == [] and classic.waiting() == 0
