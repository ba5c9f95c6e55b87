"""`jobq jobs show|list|cancel|retry` against the real servers, through the real CLIs.

Cancel on each backend and claim mode: a consumer running one long job at a time; a waiting
job is cancelled and never starts, the running one is cancelled and stops within about a
second without finishing, the one after them runs. PostgreSQL also shows, lists and retries
any job; RabbitMQ shows and retries dead ones, and refuses the rest with the reason.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import PG_DSN, fetch, jobs_table, schema_env, wait_until
from tests.contract.backends import Backend, backend_under_test, publish_raw
from tests.processors import runs

TIMED = "tests.processors:timed"
STOPPED = 3.0  # a running job cancelled ends within this (the consumer asks each second)


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-quorum",
                        "rabbitmq-classic"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """The backend under test on a queue of its own, one job at a time and none buffered."""
    one = {"JOBQ_CONSUMER__BUFFER": "0", "JOBQ_CONSUMER__SHUTDOWN_TIMEOUT": "1"}
    with backend_under_test(request, queue_name, request.param, one) as backend:
        yield backend

def jobq(backend: Backend, *args: str, code: int = 0) -> str:
    """Run ``jobq``; it must exit ``code``; its stdout (or, for a non-zero code, its stderr)."""
    result = backend.run("jobq", *args)
    assert result.returncode == code, (result.stdout, result.stderr)
    return result.stdout if code == 0 else result.stderr


def enqueue(backend: Backend, count: int) -> list[str]:
    """``count`` jobs in order; their ids."""
    if backend.transport == "postgres":
        backend.produce(count)
        assert backend.schema is not None
        return [str(row[0]) for row in fetch(
            PG_DSN, sql.SQL("SELECT id FROM {} WHERE queue = %s ORDER BY id").format(
                jobs_table(backend.schema)), [backend.queue])]
    ids = [f"job-{i}" for i in range(count)]
    for job_id in ids:
        asyncio.run(publish_raw(backend.queue, b'{"n": 1}', message_id=job_id, kind="demo"))
    return ids


def started(directory: Path) -> list[str]:
    return [job for event, job, _ in runs(directory) if event == "start"]


@pytest.mark.slow
def test_cancel_a_waiting_and_a_running_job(backend: Backend, tmp_path: Path) -> None:
    first, waiting, last = enqueue(backend, 3)
    consumer = backend.start("consumer", "-p", TIMED, "-a", f"directory={tmp_path}",
                             "-a", "sleep_ms=60000", "-n", "1")
    try:
        assert wait_until(lambda: started(tmp_path) == [first], 30), consumer.stderr
        said = jobq(backend, "jobs", "cancel", waiting)
        assert ("it was pending and will not run" if backend.transport == "postgres"
                else "tombstone left") in said, said
        # No wait for the consumer to read that tombstone: it reads them all at each look, so
        # the look that finds the next one (first's, which ends first) finds this one too.
        said = jobq(backend, "jobs", "cancel", first)
        asked = time.monotonic()  # once the request is stored: the CLI's start-up is not ours
        assert ("its consumer was asked to stop it" if backend.transport == "postgres"
                else "tombstone left") in said, said
        assert wait_until(lambda: last in started(tmp_path), STOPPED + 2), runs(tmp_path)
        assert time.monotonic() - asked < STOPPED + 2
        assert started(tmp_path) == [first, last]  # the waiting one never ran
        assert [job for event, job, _ in runs(tmp_path) if event == "end"] == []  # first cut
        if backend.transport == "postgres":
            shown = json.loads(jobq(backend, "jobs", "show", first, "--json"))
            assert shown["state"] == "cancelled", shown
            assert "cancelled by an operator" in shown["last_error"], shown
            assert json.loads(jobq(backend, "jobs", "show", waiting, "--json"))["state"] == \
                "cancelled"
            listed = json.loads(jobq(backend, "jobs", "list", "--state", "cancelled", "--json"))
            assert sorted(str(row["id"]) for row in listed) == sorted([first, waiting])
            running = json.loads(jobq(backend, "jobs", "list", "--state", "running", "--json"))
            assert [str(row["id"]) for row in running] == [last], running
            assert running[0]["attempts"] == 1, running  # the attempt it is on, in either mode
            shown = json.loads(jobq(backend, "jobs", "show", last, "--json"))
            assert (shown["state"], shown["attempts"]) == ("running", 1), shown
            err = jobq(backend, "jobs", "cancel", first, code=2)
            assert "is cancelled already: nothing to cancel" in err, err
        else:
            assert "has a tombstone already" in jobq(backend, "jobs", "cancel", first)
    finally:
        consumer.send_signal(signal.SIGTERM)
        _, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err
    # The running one; on PostgreSQL the waiting one was cancelled in its row and never
    # reached the pool; on RabbitMQ it reached it with its tombstone, and was settled unrun.
    assert f"cancelled={1 if backend.transport == 'postgres' else 2}" in err, err
    if backend.transport == "rabbitmq":
        assert f"job {waiting} cancelled (jobq jobs cancel): received with a tombstone" in err
        assert backend.waiting() == 1  # the last one, interrupted by the stop, is back
    assert backend.dead() == []


def consume_once(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    result = backend.run("consumer", "--once", *args)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_postgres_show_list_and_retry(schema: str, queue_name: str, claim: str) -> None:
    backend = Backend("postgres", queue_name, schema_env(schema, JOBQ_POSTGRES__CLAIM=claim),
                      schema=schema)
    backend.produce(2, "--kind", "doomed")
    backend.produce(1, "--kind", "later", "--delay", "3600")
    consume_once(backend, "-p", "fail", "--max-attempts", "1")
    dead = json.loads(jobq(backend, "jobs", "list", "--state", "dead", "--json"))
    assert [row["kind"] for row in dead] == ["doomed", "doomed"], dead
    assert all(row["attempts"] == 1 and row["last_error"] for row in dead), dead
    pending = json.loads(jobq(backend, "jobs", "list", "--json"))
    assert [row["kind"] for row in pending] == ["later"], pending
    later = str(pending[0]["id"])
    assert json.loads(jobq(backend, "jobs", "list", "--kind", "nothing", "--json")) == []

    shown: dict[str, Any] = json.loads(jobq(backend, "jobs", "show", str(dead[0]["id"]),
                                            "--json"))
    assert shown["state"] == "dead" and shown["kind"] == "doomed" and "n" in shown["payload"], shown
    assert shown["finished_at"] and shown["created_at"] and shown["headers"] == {}, shown
    (error,) = shown["errors"]  # its one attempt's error, kept with the row
    assert (error["attempt"], error["type"]) == (1, "jobq.core.errors.PermanentError"), error
    text = jobq(backend, "jobs", "show", str(dead[0]["id"]))  # for a person: traceback indented
    assert "errors=1" in text and "attempt 1 at " in text, text
    assert f'payload={json.dumps(shown["payload"])}' in text, text  # JSON, not a Python repr
    # Options anywhere on the line (before: "unrecognized arguments"); quiet unless -v.
    quiet = backend.run("jobq", "jobs", "show", "-q", queue_name, str(dead[0]["id"]), "--json")
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["id"] == dead[0]["id"], quiet
    assert "connected to" not in quiet.stderr, quiet.stderr
    loud = backend.run("jobq", "jobs", "show", str(dead[0]["id"]), "-v")
    assert "INFO" in loud.stderr and "connected to PostgreSQL" in loud.stderr, loud.stderr
    assert "\n    Traceback (most recent call last):" in text, text

    said = jobq(backend, "jobs", "retry", str(dead[0]["id"]))
    assert "requeued: it was dead" in said, said
    said = jobq(backend, "jobs", "retry", later)
    assert "is due now (it was delayed" in said, said
    err = jobq(backend, "jobs", "retry", later, code=2)
    assert "pending and due already: only a dead or a delayed job" in err, err
    consume_once(backend, "-p", "noop")
    states = {str(row["id"]): row["state"] for row in json.loads(
        jobq(backend, "jobs", "list", "--state", "done", "--json"))}
    assert states == {str(dead[0]["id"]): "done", later: "done"}, states
    err = jobq(backend, "jobs", "cancel", later, code=2)
    assert "is done already: nothing to cancel" in err, err
    missing = str(dead[1]["id"]) + "9999"
    err = jobq(backend, "jobs", "retry", missing, code=1)  # an answer for a script: exit 1
    assert f"jobq: no job {missing} in queue" in err, err
    err = jobq(backend, "jobs", "show", missing, "--json", code=1)
    assert err.startswith(f"jobq: no job {missing}"), err
    err = jobq(backend, "jobs", "show", "x1", code=2)
    assert "not a job id: 'x1'" in err, err
    assert "takes no id" in backend.run("jobq", "jobs", "list", "5").stderr


def test_rabbitmq_shows_and_retries_dead_jobs_and_says_what_it_cannot(
        amqp_url: str, queue_name: str) -> None:
    backend = Backend("rabbitmq", queue_name, schema_env("unused"))
    try:
        assert backend.run("jobq", "init").returncode == 0
        asyncio.run(publish_raw(queue_name, b'{"n": 1}', message_id="doomed-1", kind="doomed"))
        asyncio.run(publish_raw(queue_name, b'{"n": 2}', message_id="kept-1", kind="kept"))
        consume_once(backend, "-p", "fail", "--max-attempts", "1")
        shown = json.loads(jobq(backend, "jobs", "show", "doomed-1", "--json"))
        assert shown["state"] == "dead" and shown["kind"] == "doomed", shown
        assert shown["payload"] == {"n": 1} and shown["last_error"], shown
        listed = json.loads(jobq(backend, "jobs", "list", "--state", "dead", "--kind", "kept",
                                 "--json"))
        assert [row["id"] for row in listed] == ["kept-1"], listed
        err = jobq(backend, "jobs", "list", code=2)
        assert "RabbitMQ cannot list pending jobs" in err, err
        err = jobq(backend, "jobs", "cancel", "kept-1", code=2)
        assert "is dead already: nothing to cancel" in err, err
        said = jobq(backend, "jobs", "retry", "doomed-1")
        assert "requeued: it was dead" in said, said
        err = jobq(backend, "jobs", "show", "doomed-1", code=1)
        assert "cannot look a pending or running message up by id" in err, err
        err = jobq(backend, "jobs", "retry", "nobody", code=1)
        assert "only a dead job can be retried now" in err, err
        consume_once(backend, "-p", "noop")
        assert [row["id"] for row in backend.dead()] == ["kept-1"]
        assert backend.waiting() == 0
    finally:
        backend.cleanup()


def test_a_cancel_waits_for_a_pending_rows_momentary_lock_and_a_retry_drops_old_requests(
        schema: str, queue_name: str) -> None:
    backend = Backend("postgres", queue_name, schema_env(schema), schema=schema)
    backend.produce(2)
    first, second = (str(row[0]) for row in fetch(PG_DSN, sql.SQL(
        "SELECT id FROM {} WHERE queue = %s ORDER BY id").format(jobs_table(schema)), [queue_name]))
    # A claim, a relay batch or a `jobq jobs` probe holds a pending row for an instant: the
    # cancel waits for it (before: it took the job for running, left a request, and the job ran).
    with psycopg.connect(PG_DSN) as holder:
        holder.execute(sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(
            jobs_table(schema)), [int(first)])
        cancel = backend.start("jobq", "jobs", "cancel", first)
        blocked = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        assert wait_until(lambda: fetch(PG_DSN, blocked, [holder.info.backend_pid])[0][0] > 0,
                          30), "the cancel never waited for the row's lock"
        holder.rollback()
        out, err = cancel.communicate(timeout=30)
    assert cancel.returncode == 0, err
    assert "cancelled: it was pending and will not run" in out, out
    # A request that outlived its job's run (the job died first) is dropped by a retry, so
    # the retried run is not cancelled by it (before: it stayed and stopped the next run).
    backend.run("consumer", "--once", "-p", "fail", "--max-attempts", "1")
    fetch(PG_DSN, sql.SQL("INSERT INTO {} (job_id, queue) VALUES (%s, %s) RETURNING job_id")
          .format(sql.Identifier(schema, "cancels")), [int(second), queue_name])
    assert "requeued" in jobq(backend, "jobs", "retry", second)
    assert fetch(PG_DSN, sql.SQL("SELECT job_id FROM {}").format(
        sql.Identifier(schema, "cancels"))) == []
