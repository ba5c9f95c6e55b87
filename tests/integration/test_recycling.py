"""A consumer recycles itself for its supervisor: after consumer.max_jobs_per_process jobs, or
once its resident memory is over consumer.max_memory_mb, it stops gracefully with exit 0 and
says why; nothing is lost or run twice across the runs (issue 37, item 5)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.backends import Backend, backend_under_test
from tests.processors import completions

pytestmark = pytest.mark.integration

JOBS, LIMIT = 50, 20


@pytest.fixture(params=["postgres-lease", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, request.param) as backend:
        yield backend


def _consume(backend: Backend, directory: Path, *extra: str) -> tuple[int, str]:
    done = backend.run("consumer", "-p", "tests.processors:record", "-a", f"directory={directory}",
                       "-a", "sleep_ms=10", "-n", "4", "--shutdown-timeout", "5", *extra,
                       timeout=60)
    return done.returncode, done.stderr


def test_max_jobs_per_process_ends_each_run_after_that_many_jobs(
        backend: Backend, tmp_path: Path) -> None:
    backend.produce(JOBS, "--kind", "work")
    backend.set(CONSUMER__MAX_JOBS_PER_PROCESS=str(LIMIT))
    for run in (1, 2):  # not --once: each run ends by itself
        code, log = _consume(backend, tmp_path)
        assert code == 0, log
        assert "recycling: this process took 20 jobs (consumer.max_jobs_per_process)" in log, log
        assert len(completions(tmp_path)) == run * LIMIT, log  # exactly: no more are taken
    code, log = _consume(backend, tmp_path, "--once")  # the rest
    assert code == 0, log
    ran = collections.Counter(completions(tmp_path))
    assert len(ran) == JOBS and set(ran.values()) == {1}, ran  # every job once, across the runs


def test_max_memory_mb_ends_the_run_gracefully(backend: Backend, tmp_path: Path) -> None:
    backend.produce(5, "--kind", "work")
    backend.set(CONSUMER__MAX_MEMORY_MB="1")  # below any Python process's resident memory
    code, log = _consume(backend, tmp_path)
    assert code == 0, log
    assert "recycling: resident memory" in log and "consumer.max_memory_mb (1)" in log, log
    assert "stopped: " in log, log
