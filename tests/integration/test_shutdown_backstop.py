"""SIGTERM ends a consumer within its bound even when a handler never lets go: one that
swallows every cancel used to keep the process alive for good after the shutdown timeout."""

from __future__ import annotations

import time

import pytest

from jobq.config import load_settings
from jobq.wiring.backstop import shutdown_bound
from tests.conftest import ROOT
from tests.integration.test_observability_postgres import consumer, produce
from tests.scrape import scrape, value, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_a_handler_deaf_to_cancels_cannot_outlive_the_bound(schema: str, queue_name: str) -> None:
    bound = shutdown_bound(load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.lease": 1, "consumer.shutdown_timeout": 0.5}))  # as consumer() starts it
    running = consumer(schema, queue_name, JOBQ_POSTGRES__LEASE="1")
    produce(schema, queue_name, "deaf", 1)
    wait_for(lambda: value(scrape(running.base), "jobq_in_flight", transport="postgres",
                           queue=queue_name) == 1, 10, "the deaf job to start")
    started = time.monotonic()
    code = running.stop(timeout=bound + 10)
    took = time.monotonic() - started
    log = "".join(running.lines)
    assert code == 1, log
    assert bound - 1 < took < bound + 5, log
    assert f"shutdown still not over {bound:g}s" in log
    assert "in by_kind" in log  # where the worker waited: the handler that swallowed the cancel
