"""`jobq relay`: jobs enqueued on PostgreSQL in the caller's transaction reach RabbitMQ.

Against the real servers, through the real CLIs: a rolled-back transaction's jobs are never
relayed, a committed one's are, under their PostgreSQL ids, in order; two relays at once,
one of them killed with SIGKILL mid-run, lose nothing (a batch the killed one had published
but not marked is published again: counted as duplicates); the consumer on RabbitMQ runs
every job.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from pathlib import Path

import psycopg
from psycopg import sql

from jobq.core.port import NewJob
from jobq.transports.postgres import enqueue_many_sync, enqueue_sync
from tests.conftest import PG_DSN, fetch, jobs_table, schema_env, wait_until
from tests.contract.backends import Backend
from tests.processors import completions

JOBS = 3000


def pending(pg: Backend) -> int:
    assert pg.schema is not None
    rows = fetch(PG_DSN, sql.SQL("SELECT count(*) FROM {} WHERE queue = %s AND status = "
                                 "'pending'").format(jobs_table(pg.schema)), [pg.queue])
    return int(rows[0][0])  # type: ignore[call-overload]


def ready(rabbit: Backend) -> int:
    return int(rabbit.depth()["ready"])


def test_committed_jobs_are_relayed_in_order_and_rolled_back_ones_never(
        both: tuple[Backend, Backend], tmp_path: Path) -> None:
    pg, rabbit = both
    assert pg.schema is not None
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        with conn.transaction() as rolled_back:
            enqueue_sync(conn, NewJob(kind="gone"), queue=pg.queue, schema=pg.schema)
            raise psycopg.Rollback(rolled_back)
        with conn.transaction():
            kept = enqueue_many_sync(conn, [NewJob(kind="kept", payload={"i": i})
                                            for i in range(50)], queue=pg.queue, schema=pg.schema)
    result = pg.run("jobq", "relay", "--once", "--batch", "7")
    assert result.returncode == 0, result.stderr
    assert "relay stopped: relayed=50 refused=0 batches=8" in result.stderr, result.stderr
    assert pending(pg) == 0
    done = rabbit.run("consumer", "--once", "-n", "1", "-p", "tests.processors:record",
                      "-a", f"directory={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert completions(tmp_path) == kept  # the same ids, in the order they were enqueued
    again = pg.run("jobq", "relay", "--once")
    assert "relayed=0" in again.stderr, again.stderr


def test_two_relays_one_killed_mid_run_lose_nothing(both: tuple[Backend, Backend],
                                                     tmp_path: Path) -> None:
    pg, rabbit = both
    pg.produce(JOBS, "--batch", "500")
    ids = {str(row[0]) for row in fetch(PG_DSN, sql.SQL("SELECT id FROM {} WHERE queue = %s")
                                        .format(jobs_table(pg.schema or "")), [pg.queue])}
    assert len(ids) == JOBS
    victim = pg.start("jobq", "relay", "--batch", "50")
    survivor = pg.start("jobq", "relay", "--batch", "50")
    try:
        assert wait_until(lambda: ready(rabbit) >= 200, 30)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=10)
        assert wait_until(lambda: pending(pg) == 0, 60), pending(pg)
    finally:
        if victim.poll() is None:  # the test failed before the kill: no relay outlives it
            victim.kill()
            victim.communicate(timeout=10)
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=30)
    assert survivor.returncode == 0, err
    assert "relay stopped: relayed=" in err, err
    result = rabbit.run("consumer", "--once", "-n", "8", "-p", "tests.processors:record",
                        "-a", f"directory={tmp_path}", timeout=120)
    assert result.returncode == 0, result.stderr
    seen = collections.Counter(completions(tmp_path))
    assert set(seen) == ids  # lost 0
    duplicates = sum(n - 1 for n in seen.values())
    assert duplicates <= 50, duplicates  # at most the killed relay's one unmarked batch
    assert rabbit.dead() == []


def test_relay_refuses_a_bad_batch_and_an_uninitialised_schema(both: tuple[Backend, Backend]
                                                                ) -> None:
    pg, _ = both
    result = pg.run("jobq", "relay", "--batch", "0")
    assert result.returncode == 2 and "--batch: at least 1" in result.stderr
    bare = Backend("postgres", pg.queue, schema_env("t_no_such_schema"))
    began = time.monotonic()
    result = bare.run("jobq", "relay", "--once")
    assert result.returncode == 2, result.stderr
    assert "run `jobq init`" in result.stderr and time.monotonic() - began < 30




def test_a_job_rabbitmq_cannot_take_is_dead_lettered_and_the_rest_relayed(
        both: tuple[Backend, Backend]) -> None:
    pg, rabbit = both
    assert pg.schema is not None
    pg.produce(3)
    # Over limits.max_payload: the schema cannot see that (it refuses a payload that is not an
    # object, migration 13), and RabbitMQ's publish would refuse it.
    bad = fetch(PG_DSN, sql.SQL("INSERT INTO {} (queue, kind, payload) VALUES (%s, 'x', %s) "
                                "RETURNING id").format(jobs_table(pg.schema)),
                [pg.queue, json.dumps({"blob": "x" * 1_100_000})])[0][0]
    pg.produce(2)
    result = pg.run("jobq", "relay", "--once")  # before: MalformedJob ended it, every time
    assert result.returncode == 0, result.stderr
    assert "relayed=5 " in result.stderr and "cannot be relayed" in result.stderr, result.stderr
    assert ready(rabbit) == 5
    dead = fetch(PG_DSN, sql.SQL("SELECT status, last_error FROM {} WHERE id = %s").format(
        jobs_table(pg.schema)), [bad])[0]
    assert dead[0] == "dead" and "limits.max_payload" in str(dead[1]), dead


def test_relay_once_leaves_a_queue_another_relay_holds(both: tuple[Backend, Backend]) -> None:
    pg, _ = both
    assert pg.schema is not None
    pg.produce(1)
    with psycopg.connect(PG_DSN) as holder:  # as a relay in the middle of a batch
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('jobq relay'), hashtext(%s))",
                       [f"{pg.schema}.{pg.queue}"])
        began = time.monotonic()
        result = pg.run("jobq", "relay", "--once", timeout=30)  # before: it waited for ever
    assert result.returncode == 0, result.stderr
    assert "another relay holds this queue" in result.stderr
    assert time.monotonic() - began < 20
    assert pending(pg) == 1
