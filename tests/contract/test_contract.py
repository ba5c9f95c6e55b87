"""One suite, every transport: the same job story must end the same way on each.

Each test drives the real ``producer``, ``consumer`` and ``jobq`` commands against the real
server, on a queue (and for Postgres a schema) of its own, and reads the outcome through the
handler's event log (tests/contract/story.py) and ``jobq dead list`` / ``jobq stats``.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Stderr, schema_env
from tests.contract.backends import Backend, rabbit_backend
from tests.contract.story import RETRY_DELAY, events

STORY = "tests.contract.story:story"
CLAIM = {"postgres": "lease", "transaction": "transaction"}  # the Postgres params' claim modes


@pytest.fixture(params=["postgres", "transaction", "rabbitmq"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """The backend under test, on a fresh queue; what it declared is removed afterwards.

    ``postgres`` is lease mode (the default claim), ``transaction`` the same schema and commands
    with ``postgres.claim: transaction``.
    """
    if request.param in CLAIM:
        schema = request.getfixturevalue("schema")
        env = schema_env(schema, JOBQ_POSTGRES__CLAIM=CLAIM[request.param])
        # Transaction mode keeps no buffer (docs/claim-modes.md): a buffered job would hold a
        # connection, an open transaction and a row lock while it waited for a worker.
        yield Backend("postgres", queue_name, env, schema=schema, buffers=request.param != "transaction")
        return
    request.getfixturevalue("amqp_url")
    backend = rabbit_backend(queue_name)
    try:
        yield backend
    finally:
        backend.cleanup()


def consumer_args(directory: Path, *extra: str) -> list[str]:
    return ["--processor", STORY, "-a", f"directory={directory}", *extra]


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def stop(process: subprocess.Popen[str], timeout: float = 20,
         signalled: bool = False) -> tuple[int, str]:
    """SIGTERM (unless ``signalled`` already), wait, return the exit code and stderr."""
    if not signalled:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def by_event(rows: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["event"] == event]


def test_success_and_once_exits_when_drained(backend: Backend, tmp_path: Path) -> None:
    backend.produce(20, "--kind", "ok")
    assert backend.waiting() == 20

    done = backend.run("consumer", "--once", *consumer_args(tmp_path))

    assert done.returncode == 0, done.stderr
    ok = by_event(events(tmp_path), "ok")
    assert len({r["id"] for r in ok}) == len(ok) == 20
    assert all(r["attempt"] == 1 for r in ok)
    assert backend.waiting() == 0
    again = backend.run("consumer", "--once", *consumer_args(tmp_path), timeout=30)
    assert again.returncode == 0, again.stderr
    assert len(by_event(events(tmp_path), "ok")) == 20  # an empty queue: nothing ran, exit 0


def test_retry_is_not_run_again_before_its_delay(backend: Backend, tmp_path: Path) -> None:
    backend.produce(1, "--kind", "retry")
    consumer = backend.start("consumer", *consumer_args(tmp_path))
    try:
        assert wait_for(lambda: by_event(events(tmp_path), "ok"), 20), "retry never succeeded"
    finally:
        code, err = stop(consumer)
    assert code == 0, err
    rows = events(tmp_path)
    assert [(r["event"], r["attempt"]) for r in rows] == [
        ("start", 1), ("fail", 1), ("start", 2), ("ok", 2)]
    waited = rows[2]["t"] - rows[1]["t"]
    assert waited >= RETRY_DELAY, f"run again after {waited:.3f}s, before its {RETRY_DELAY}s delay"
    assert backend.dead() == []


def test_permanent_failure_is_dead_lettered_with_reason(backend: Backend, tmp_path: Path) -> None:
    backend.produce(1, "--kind", "fail")
    backend.produce(3, "--kind", "ok")

    done = backend.run("consumer", "--once", *consumer_args(tmp_path))

    assert done.returncode == 0, done.stderr
    assert len(by_event(events(tmp_path), "ok")) == 3
    (dead,) = backend.dead()
    assert dead["kind"] == "fail" and dead["attempts"] == 1
    assert dead["last_error"] == "PermanentError: this job can never work"
    assert backend.waiting() == 0


def test_malformed_message_is_dead_lettered_and_never_run(backend: Backend, tmp_path: Path) -> None:
    backend.inject_malformed()
    backend.produce(3, "--kind", "ok")

    done = backend.run("consumer", "--once", *consumer_args(tmp_path))

    assert done.returncode == 0, done.stderr
    rows = events(tmp_path)
    assert len(by_event(rows, "ok")) == 3 and len({r["id"] for r in rows}) == 3
    (dead,) = backend.dead()
    assert dead["last_error"].startswith("MalformedJob: ")
    assert ("not a JSON object" in dead["last_error"]  # RabbitMQ; PostgreSQL refuses such a row
            or "limits.max_payload" in dead["last_error"]), dead["last_error"]


def test_exhausted_attempts_are_dead_lettered(backend: Backend, tmp_path: Path) -> None:
    backend.set(RETRY__BASE_DELAY="0.05", RETRY__MAX_DELAY="0.2", RABBITMQ__RETRY_TIERS="[0.2]")
    backend.produce(1, "--kind", "flaky", "--max-attempts", "3")
    consumer = backend.start("consumer", *consumer_args(tmp_path))
    try:
        assert wait_for(lambda: len(by_event(events(tmp_path), "fail")) >= 3, 20)
    finally:
        code, err = stop(consumer)
    assert code == 0, err
    assert [r["attempt"] for r in by_event(events(tmp_path), "start")] == [1, 2, 3]
    (dead,) = backend.dead()
    assert dead["attempts"] == 3 and dead["max_attempts"] == 3
    assert dead["last_error"] == ("RuntimeError: flaky failure on attempt 3 "
                                  "(gave up after 3 of 3 attempts)")


def test_graceful_shutdown_releases_unstarted_jobs(backend: Backend, tmp_path: Path) -> None:
    backend.set(CONSUMER__BUFFER="2")
    backend.produce(8, "--kind", "slow")
    gate = tmp_path / "gate"  # the running jobs end once it exists: after the SIGTERM
    consumer = backend.start("consumer", "--concurrency", "2",
                             *consumer_args(tmp_path, "-a", f"gate={gate}"))
    lines = Stderr(consumer)
    try:
        assert wait_for(lambda: len(by_event(events(tmp_path), "start")) == 2, 20)
        if backend.buffers:  # the buffer fills behind the two running jobs: 4 taken, 4 wait
            assert wait_for(lambda: backend.waiting() == 4, 20), backend.depth()
    finally:
        consumer.send_signal(signal.SIGTERM)
        try:
            lines.wait_for("stop signal: ", 20)  # written once no worker may start a job
        finally:
            gate.touch()
            code = consumer.wait(20)
    err = lines.text()
    assert code == 0, err
    if backend.buffers:
        assert "released=2" in err
    else:  # nothing was received beyond the two running jobs, so nothing is handed back
        assert "released=0" in err
    first = events(tmp_path)
    assert len(by_event(first, "ok")) == 2  # the running jobs were let finish

    done = backend.run("consumer", "--once", *consumer_args(tmp_path, "-a", "slow_ms=0"))

    assert done.returncode == 0, done.stderr
    rest = events(tmp_path)[len(first):]
    assert len(by_event(rest, "ok")) == 6
    assert {r["id"] for r in by_event(first + rest, "ok")} == {r["id"] for r in first + rest}
    assert all(r["attempt"] == 1 for r in rest), (rest, err)  # released: not counted
    assert backend.dead() == []
