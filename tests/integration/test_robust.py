"""Issue 19 items 1, 6 and 7 against the real servers, through the real CLIs.

Item 1: with ``--concurrency 1 --once`` and 5 jobs, a first job whose handler fails in one of
three awkward ways used to make the consumer hang for ever, silently: the delivery was never
settled. Now the consumer exits on its own, the job is retried with a readable reason and the
other four are done. Item 7: a consumer with no processor refuses to start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from tests.conftest import PG_DSN, fetch
from tests.contract.backends import Backend, backend_under_test
from tests.processors import completions

REASONS = {
    "surrogate": "FileNotFoundError: /in/\\udcff.csv",
    "cancelled": "HandlerCancelled: CancelledError raised by the handler",
    "bad_retry": "Retry: retry requested (delay=soon) (the retry decision failed: ValueError",
}


@pytest.fixture(params=["postgres-lease", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """Postgres (lease mode) or RabbitMQ, on a queue (and schema) of the test's own."""
    with backend_under_test(request, queue_name, request.param) as backend:
        yield backend


def last_errors(backend: Backend) -> list[str]:
    assert backend.schema is not None
    rows = fetch(PG_DSN, sql.SQL("SELECT last_error FROM {} WHERE status = 'pending'").format(
        sql.Identifier(backend.schema, "jobs")))
    return [str(r) for (r,) in rows]


@pytest.mark.parametrize("mode", sorted(REASONS))
def test_a_bad_first_job_is_retried_with_a_readable_reason_and_the_rest_are_done(
        backend: Backend, mode: str, tmp_path: Path) -> None:
    backend.produce(5, "--max-attempts", "3")  # payloads n = 0..4; n = 0 fails
    # The retry must not come due within the run: full jitter can draw a delay of a few ms,
    # and --once would then run (and count) the failed job a second time.
    backend.set(RETRY__BASE_DELAY="60", RETRY__JITTER="false")
    result = backend.run("consumer", "--concurrency", "1", "--once",
                         "-p", "tests.processors:bad_first", "-a", f"mode={mode}",
                         "-a", f"directory={tmp_path}", timeout=40)  # before: hung, no log line
    assert result.returncode == 0, result.stderr
    assert len(set(completions(tmp_path))) == 4
    retried = [line for line in result.stderr.splitlines() if "attempt 1/3 retried" in line]
    assert len(retried) == 1 and REASONS[mode] in retried[0], result.stderr
    assert "stopped: ok=4 retried=1 dead=0" in result.stderr
    assert backend.waiting() == 1  # the failed job, waiting for its retry
    if backend.transport == "postgres":
        (error,) = last_errors(backend)
        assert error.startswith(REASONS[mode])


def test_a_consumer_without_a_processor_refuses_to_start(backend: Backend) -> None:
    backend.produce(3)
    result = backend.run("consumer", "--once", timeout=30)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("jobq: config error: consumer.processor: no processor configured")
    assert backend.waiting() == 3  # before: all three settled as done without running


def test_a_sync_handler_that_overran_never_runs_twice_at_once(
        backend: Backend, tmp_path: Path) -> None:
    """Item 6: a plain ``def`` past job_timeout keeps its thread; its job must not run again
    (here, or elsewhere) until that thread returned. Before, on Postgres: settled at the
    timeout and run again 0.01 s later while the first run still slept (this test failed). On
    RabbitMQ the 1 s retry tier outlasted the --once run, so it passed there before too; it
    guards both all the same."""
    backend.produce(1, "--max-attempts", "3")
    args = ("consumer", "--concurrency", "1", "--once", "--job-timeout", "0.3",
            "-p", "tests.processors:sync_overrun", "-a", f"directory={tmp_path}",
            "-a", "sleep_s=2.5")
    backend.set(RETRY__BASE_DELAY="0.01", RETRY__JITTER="false")
    for _ in range(10):
        result = backend.run(*args, timeout=40)
        assert result.returncode == 0, result.stderr
        runs = (tmp_path / "runs.log").read_text().split("\n")
        if sum(line.startswith("end ") for line in runs) >= 2:
            break
    events = [line.split() for line in (tmp_path / "runs.log").read_text().splitlines()]
    spans: dict[str, list[float]] = {}
    for _what, _job, attempt, at in events:
        spans.setdefault(attempt, []).append(float(at))
    assert sorted(spans) == ["1", "2"], events
    (start1, end1), (start2, _end2) = spans["1"], spans["2"]
    assert end1 - start1 >= 2.4  # the first run slept its 2.5 s in its thread
    assert start2 >= end1, events  # the second began only once the first had returned
