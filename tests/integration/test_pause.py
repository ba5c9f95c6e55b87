"""`jobq pause` / `jobq resume` against the real servers, through the real CLIs.

PostgreSQL in both claim modes and RabbitMQ with both work-queue types: a pause with jobs in
flight lets the running ones finish, starts none once the consumer has noticed it (within about
a second; NOTICED where a test measures it), and leaves every unstarted job in the queue; the
resume runs the rest; every job ran exactly once and none is dead.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import psycopg
import pytest
from psycopg import sql

from tests.conftest import AMQP_URL, consuming, schema_env, wait_until
from tests.contract.backends import Backend, backend_under_test, rabbit_backend
from tests.processors import runs

TIMED = "tests.processors:timed"
JOBS = 30
NOTICED = 2.0  # a consumer takes no new job later than this after `jobq pause` returned
# The bound on noticing a pause or a resume where a test waits for the consumer to say so: far
# above NOTICED, so that a loaded machine's slowness is not taken for a consumer deaf to them.
NOTICED_WITHIN = 30.0


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-quorum",
                        "rabbitmq-classic"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """The backend under test on a queue of its own; what it declared is removed afterwards."""
    with backend_under_test(request, queue_name, request.param) as backend:
        yield backend

def jobq(backend: Backend, *args: str) -> str:
    """Run ``jobq``; it must exit 0; its stdout."""
    result = backend.run("jobq", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def stats(backend: Backend) -> dict[str, Any]:
    data: dict[str, Any] = backend.look("stats")
    return data


def events(directory: Path, event: str) -> list[tuple[str, float]]:
    return [(job_id, at) for what, job_id, at in runs(directory) if what == event]


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    return process.returncode, err


@pytest.mark.slow
def test_pause_with_jobs_in_flight_then_resume_runs_every_job_once(backend: Backend,
                                                                  tmp_path: Path) -> None:
    backend.produce(JOBS)
    gate = tmp_path / "gate"  # the running end once it is there: the queue cannot run dry
    consumer = backend.start("consumer", "-p", TIMED, "-a", f"directory={tmp_path}",
                             "-a", f"gate={gate}", "-n", "3")
    err = consuming(consumer)
    try:
        assert wait_until(lambda: len(events(tmp_path, "start")) >= 3, 30), err.text()
        said = jobq(backend, "pause")
        assert "paused: its consumers take no new job" in said, said
        err.wait_for(r"queue paused \(jobq pause\)", NOTICED_WITHIN)
        gate.touch()
        opened = time.time()  # from now on a worker is free: any start is the pause's failure
        # The running finish, and nothing sits in the consumer: every job not done is back in
        # the queue, waiting.
        assert wait_until(lambda: backend.waiting() == JOBS - len(events(tmp_path, "end")),
                          30, step=0.5), err.text()
        started, ended = events(tmp_path, "start"), events(tmp_path, "end")
        assert {job for job, _ in started} == {job for job, _ in ended}  # the running finished
        assert len(ended) < JOBS  # the pause held some back
        state = stats(backend)
        assert state["paused"] is True and state["paused_since"], state
        if backend.transport == "postgres":
            assert state["depth"]["running"] == 0, state
        assert "paused since" in jobq(backend, "stats")
        assert "is already paused since" in jobq(backend, "pause")

        resumed_at = time.time()
        said = jobq(backend, "resume")
        assert "resumed: it had been paused since" in said, said
        assert [job for job, at in events(tmp_path, "start") if opened < at < resumed_at] == []
        err.wait_for("queue resumed", NOTICED_WITHIN)
        assert wait_until(lambda: len(events(tmp_path, "end")) == JOBS, 60)
        assert "is not paused: nothing changed" in jobq(backend, "resume")
    finally:
        consumer.send_signal(signal.SIGTERM)
        consumer.wait(30)
    assert consumer.returncode == 0, err.text()
    starts = collections.Counter(job for job, _ in events(tmp_path, "start"))
    assert len(starts) == JOBS and set(starts.values()) == {1}, starts  # each exactly once
    assert backend.dead() == []
    assert backend.waiting() == 0
    assert stats(backend)["paused"] is False


def test_once_on_a_paused_queue_exits_at_once_taking_nothing(backend: Backend,
                                                             tmp_path: Path) -> None:
    backend.produce(5)
    jobq(backend, "pause")
    began = time.monotonic()
    result = backend.run("consumer", "--once", "-p", TIMED, "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began < 15  # start-up and one look; it does not wait for a resume
    assert "the queue is paused: nothing more to do (--once)" in result.stderr
    # It looked before it opened: nothing was received, so nothing had to be handed back.
    assert "released=0" in result.stderr, result.stderr
    if backend.transport == "rabbitmq":
        assert "connected (paused) to" in result.stderr, result.stderr
    assert runs(tmp_path) == [] and backend.waiting() == 5
    jobq(backend, "resume")
    result = backend.run("consumer", "--once", "-p", TIMED, "-a", f"directory={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert len(events(tmp_path, "end")) == 5


def test_a_schema_from_before_migration_7_is_never_paused_and_pause_names_jobq_init(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    backend = Backend("postgres", queue_name, schema_env(schema), schema=schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as a jobq before pause left it
        conn.execute(sql.SQL("DROP TABLE {}; DELETE FROM {} WHERE version = 7").format(
            sql.Identifier(schema, "queues"), sql.Identifier(schema, "migrations")))
    assert stats(backend)["paused"] is False
    result = backend.run("jobq", "pause")
    assert result.returncode == 2, result.stderr
    assert "has no queues table (pause and resume, migration 7): run `jobq init`" in result.stderr
    assert jobq(backend, "init").count("applied migration 7") == 1


def test_a_consumer_whose_pause_flag_queue_is_deleted_goes_on_and_still_sees_a_pause(
        amqp_url: str, queue_name: str, tmp_path: Path) -> None:
    backend = rabbit_backend(queue_name)
    try:
        backend.produce(200)
        consumer = backend.start("consumer", "-p", TIMED, "-a", f"directory={tmp_path}",
                                 "-a", "sleep_ms=50", "-n", "2")
        err = consuming(consumer)
        try:
            assert wait_until(lambda: len(events(tmp_path, "end")) >= 5, 30)
            asyncio.run(delete_queue(f"{queue_name}.paused"))  # as if an older jobq had declared
            # Its looks (one a second) find no <q>.paused: not paused, and it goes on. A look
            # that failed on it would have ended the session: the check at the end.
            done = len(events(tmp_path, "end"))
            assert wait_until(lambda: len(events(tmp_path, "end")) > done + 60, 30)
            jobq(backend, "pause")  # declares <q>.paused again
            err.wait_for(r"queue paused \(jobq pause\)", NOTICED_WITHIN)
            noticed = time.time()  # once it said so, it starts nothing
            assert wait_until(lambda: len(events(tmp_path, "start"))
                              == len(events(tmp_path, "end")), 10)
            assert [job for job, at in events(tmp_path, "start") if at > noticed] == []
            jobq(backend, "resume")
            assert wait_until(lambda: len(events(tmp_path, "end")) == 200, 60)
        finally:
            consumer.send_signal(signal.SIGTERM)
            consumer.wait(30)
        assert consumer.returncode == 0, err.text()
        # A 404 closed only the look's channel.
        assert "lost the RabbitMQ session" not in err.text(), err.text()
    finally:
        backend.cleanup()


async def delete_queue(name: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)
