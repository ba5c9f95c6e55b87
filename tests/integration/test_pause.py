"""`jobq pause` / `jobq resume` against the real servers, through the real CLIs.

PostgreSQL in both claim modes and RabbitMQ with both work-queue types: a pause with jobs in
flight lets the running ones finish, starts none after about a second (the test allows two),
and leaves every unstarted job in the queue; the resume runs the rest; every job ran exactly
once and none is dead.
"""

from __future__ import annotations

import asyncio
import collections
import json
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

from tests.conftest import AMQP_URL, schema_env, wait_until
from tests.contract.backends import Backend, backend_under_test, rabbit_backend
from tests.processors import runs

TIMED = "tests.processors:timed"
JOBS = 30
NOTICED = 2.0  # a consumer takes no new job later than this after `jobq pause` returned


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
    data: dict[str, Any] = json.loads(jobq(backend, "stats", "--json"))
    return data


def events(directory: Path, event: str) -> list[tuple[str, float]]:
    return [(job_id, at) for what, job_id, at in runs(directory) if what == event]


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    return process.returncode, err


def test_pause_with_jobs_in_flight_then_resume_runs_every_job_once(backend: Backend,
                                                                  tmp_path: Path) -> None:
    backend.produce(JOBS)
    consumer = backend.start("consumer", "-p", TIMED, "-a", f"directory={tmp_path}",
                             "-a", "sleep_ms=300", "-n", "3")
    try:
        assert wait_until(lambda: len(events(tmp_path, "end")) >= 3, 30), consumer.stderr
        said = jobq(backend, "pause")
        paused_at = time.time()
        assert "paused: its consumers take no new job" in said, said
        time.sleep(NOTICED + 1.0)

        started, ended = events(tmp_path, "start"), events(tmp_path, "end")
        assert [job for job, at in started if at > paused_at + NOTICED] == []
        assert {job for job, _ in started} == {job for job, _ in ended}  # the running finished
        assert len(ended) < JOBS  # the pause held some back
        state = stats(backend)
        assert state["paused"] is True and state["paused_since"], state
        # Nothing sits in the consumer: every job not done is back in the queue, waiting.
        assert backend.waiting() == JOBS - len(ended), state
        if backend.transport == "postgres":
            assert state["depth"]["running"] == 0, state
        assert "paused since" in jobq(backend, "stats")
        assert "is already paused since" in jobq(backend, "pause")

        said = jobq(backend, "resume")
        resumed_at = time.time()
        assert "resumed: it had been paused since" in said, said
        assert wait_until(lambda: len(events(tmp_path, "end")) == JOBS, 60)
        first = min(at for _, at in events(tmp_path, "start") if at > paused_at + NOTICED)
        assert first < resumed_at + NOTICED
        assert "is not paused: nothing changed" in jobq(backend, "resume")
    finally:
        code, err = stop(consumer)
    assert code == 0, err
    assert "queue paused (jobq pause)" in err and "queue resumed" in err, err
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
        try:
            assert wait_until(lambda: len(events(tmp_path, "end")) >= 5, 30)
            asyncio.run(delete_queue(f"{queue_name}.paused"))  # as if an older jobq had declared
            time.sleep(1.5)  # its looks find no <q>.paused: not paused, and it goes on
            done = len(events(tmp_path, "end"))
            assert wait_until(lambda: len(events(tmp_path, "end")) > done + 5, 10)
            jobq(backend, "pause")  # declares <q>.paused again
            paused_at = time.time()
            time.sleep(NOTICED + 0.5)
            assert [job for job, at in events(tmp_path, "start") if at > paused_at + NOTICED] == []
            jobq(backend, "resume")
            assert wait_until(lambda: len(events(tmp_path, "end")) == 200, 60)
        finally:
            code, err = stop(consumer)
        assert code == 0, err
        assert "lost the RabbitMQ session" not in err, err  # a 404 closed only the look's channel
    finally:
        backend.cleanup()


async def delete_queue(name: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)
