"""postgres.retention and `jobq prune` on PostgreSQL: old done and dead rows go, in batches,
one pruner at a time; young rows and unfinished jobs stay; a failed round costs nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobq.config import ConnectConfig, PostgresConfig, RetentionConfig
from jobq.core.errors import ConnectionLost
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.retention import Pruner
from tests.conftest import fetch, jobs_table, pg_args, run_cli, schema_env, start_cli, until, wait_until

# (status, finished seconds ago or None): the rows every test starts from, 2 of each.
OLD, YOUNG = 7200, 60
ROWS = [("done", OLD), ("done", YOUNG), ("dead", OLD), ("dead", YOUNG), ("pending", None),
        ("running", None)]


def insert(dsn: str, schema: str, queue: str, status: str, age: float | None, count: int = 2
           ) -> None:
    """``count`` rows of ``status`` in ``queue`` that finished ``age`` seconds ago (None: not)."""
    fetch(dsn, sql.SQL(
        "INSERT INTO {} (queue, kind, payload, status, finished_at, locked_until) "
        "SELECT %s, 'k', '{{}}', %s, now() - make_interval(secs => %s), "
        "CASE WHEN %s = 'running' THEN now() + interval '1 hour' END "
        "FROM generate_series(1, %s) RETURNING id").format(jobs_table(schema)),
        [queue, status, age, status, count])


def left(dsn: str, schema: str, queue: str) -> dict[tuple[str, bool | None], int]:
    """(status, finished more than an hour ago) -> rows of ``queue`` still there."""
    rows = fetch(dsn, sql.SQL("SELECT status, finished_at < now() - interval '1 hour', count(*) "
                              "FROM {} WHERE queue = %s GROUP BY 1, 2").format(jobs_table(schema)),
                 [queue])
    return {(str(s), old): int(n) for s, old, n in rows}  # type: ignore[call-overload]


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[Any]:
    """A pool of 4 on the test server."""
    pool = await open_pool(pg_dsn, ConnectConfig(), 4, logging.getLogger("jobq.test"),
                           network_timeout=5.0)
    try:
        yield pool
    finally:
        await pool.close()


def pruner(pool: Any, schema: str, queue: str, **retention: Any) -> Pruner:
    return Pruner(pool, PostgresConfig(schema=schema, retention=RetentionConfig(**retention)),
                  queue=queue)


def seed(dsn: str, schema: str, queue: str) -> None:
    for status, age in ROWS:
        insert(dsn, schema, queue, status, age)


async def test_a_round_deletes_old_done_and_dead_rows_and_keeps_the_rest(
        pool: Any, pg_dsn: str, schema: str, queue_name: str) -> None:
    seed(pg_dsn, schema, queue_name)
    seed(pg_dsn, schema, "other")  # another queue of the same table is not this pruner's
    assert await pruner(pool, schema, queue_name, done=3600, dead=3600).round() == {
        "done": 2, "dead": 2}
    assert left(pg_dsn, schema, queue_name) == {
        ("done", False): 2, ("dead", False): 2, ("pending", None): 2, ("running", None): 2}
    assert sum(left(pg_dsn, schema, "other").values()) == 12

    # Only the states that have a retention: dead rows are kept for ever here.
    seed(pg_dsn, schema, queue_name)
    one = pruner(pool, schema, queue_name, done=3600)
    assert await one.round() == {"done": 2}
    assert left(pg_dsn, schema, queue_name)[("dead", True)] == 2
    assert one.counters() == {"pruned_done": 2, "pruned_dead": 0}
    assert await pruner(pool, schema, queue_name).round() == {}  # nothing set: nothing pruned


class Counting(Pruner):
    """A pruner that records the rows each of its DELETE statements deleted."""

    batches: list[int]

    async def _execute(self, conn: Any, name: str, params: dict[str, Any]) -> Any:
        cur = await super()._execute(conn, name, params)
        if name == "prune":
            self.batches = [*getattr(self, "batches", []), cur.rowcount]
        return cur


async def test_more_rows_than_a_batch_go_in_batches(
        pool: Any, pg_dsn: str, schema: str, queue_name: str) -> None:
    insert(pg_dsn, schema, queue_name, "done", OLD, 2500)
    insert(pg_dsn, schema, queue_name, "done", YOUNG, 10)
    counting = Counting(pool, PostgresConfig(schema=schema, retention=RetentionConfig(
        done=3600, batch=1000)), queue=queue_name)
    assert await counting.prune("done", 3600) == 2500
    assert counting.batches == [1000, 1000, 500]  # each its own statement and transaction
    assert left(pg_dsn, schema, queue_name) == {("done", False): 10}


@contextlib.contextmanager
def hold_lock(dsn: str, schema: str, queue: str) -> Iterator[None]:
    """A session holding the prune lock of ``schema``.``queue``, as a consumer's round does.

    Unlocked before the session closes: a closed session's backend lets go of its locks only
    as it exits, after the close returned, and a round right after could still find it held.
    """
    key = [f"{schema}.{queue}"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = conn.execute("SELECT pg_try_advisory_lock(hashtext('jobq prune'), hashtext(%s))",
                           key).fetchone()
        assert got == (True,)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('jobq prune'), hashtext(%s))", key)


async def test_one_pruner_at_a_time_the_others_skip_the_round(
        pool: Any, pg_dsn: str, schema: str, queue_name: str) -> None:
    seed(pg_dsn, schema, queue_name)
    first = pruner(pool, schema, queue_name, done=3600, dead=3600)
    with hold_lock(pg_dsn, schema, queue_name):
        assert await first.round() is None  # skipped: nothing deleted, nothing waited for
        assert first.skipped == 1 and left(pg_dsn, schema, queue_name)[("done", True)] == 2
        assert await pruner(pool, schema, "other", done=3600).round() == {"done": 0}  # not its lock
    assert await first.round() == {"done": 2, "dead": 2}

    # Two consumers' rounds at once, over enough rows that the first is still deleting when the
    # second asks: one does the work, the other skips.
    insert(pg_dsn, schema, queue_name, "done", OLD, 20_000)
    a, b = (pruner(pool, schema, queue_name, done=3600, batch=100) for _ in range(2))
    results = await asyncio.gather(a.round(), b.round())
    assert sorted(results, key=lambda r: r is None) == [{"done": 20_000}, None], results
    assert not advisory_locks(pg_dsn, schema, queue_name)  # released at the end of the round


def advisory_locks(dsn: str, schema: str, queue: str) -> list[tuple[object, ...]]:
    """The sessions holding the prune lock of ``schema``.``queue``."""
    return fetch(dsn, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                      "AND classid = (hashtext('jobq prune') & x'ffffffff'::bigint)::oid "
                      "AND objid = (hashtext(%s) & x'ffffffff'::bigint)::oid", [f"{schema}.{queue}"])


class Refused(Pruner):
    """A pruner that counts its tries for the prune lock that found it held."""

    refused = 0

    async def _try_lock(self, conn: Any) -> bool:
        got = await super()._try_lock(conn)
        self.refused += not got
        return got


async def test_jobq_prune_waits_for_a_consumers_round_instead_of_skipping(
        pool: Any, pg_dsn: str, schema: str, queue_name: str) -> None:
    seed(pg_dsn, schema, queue_name)
    waiter = Refused(pool, PostgresConfig(schema=schema, retention=RetentionConfig()),
                     queue=queue_name)
    with hold_lock(pg_dsn, schema, queue_name):
        task = asyncio.create_task(waiter.prune("dead", 3600))
        # Refused three times, a poll apart, and still waiting (not skipped, not given up).
        await until(lambda: waiter.refused >= 3 or task.done(), "three refused tries", 10)
        assert not task.done()
    assert await asyncio.wait_for(task, 5) == 2


async def test_a_failing_round_is_logged_and_the_next_one_tries_again(
        pool: Any, pg_dsn: str, queue_name: str, caplog: pytest.LogCaptureFixture) -> None:
    # A schema without a jobs table: the lock is taken, then every DELETE fails.
    broken = pruner(pool, "no_such_schema", queue_name, done=1, interval=0.2)
    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if "pruning queue" in r.getMessage()]

    task = asyncio.create_task(broken.run())
    with caplog.at_level(logging.WARNING, "jobq.postgres"):
        await until(lambda: len(failures()) >= 3 or task.done(), "three failed rounds", 10)
    assert not task.done()  # the pruner lives on, as the consumer does
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert "no_such_schema" in failures()[0], failures()
    # Gone with the failed rounds' connections (once the server has ended their sessions).
    assert wait_until(lambda: not advisory_locks(pg_dsn, "no_such_schema", queue_name), 5)


def prune_cli(schema: str, queue: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli("jobq", "prune", *pg_args(queue), *args, env=schema_env(schema, **env))


def test_jobq_prune_uses_the_retention_or_older_than_and_refuses_without_either(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    seed(pg_dsn, schema, queue_name)
    refused = prune_cli(schema, queue_name)
    assert refused.returncode == 2, refused
    assert "--older-than" in refused.stderr and "postgres.retention.done" in refused.stderr
    refused = prune_cli(schema, queue_name, "--state", "dead",
                        JOBQ_POSTGRES__RETENTION__DONE="1h")
    assert refused.returncode == 2 and "postgres.retention.dead" in refused.stderr, refused

    done = prune_cli(schema, queue_name, JOBQ_POSTGRES__RETENTION__DONE="1h")
    assert (done.returncode, done.stdout) == (
        0, f"pruned 2 done jobs older than 1h from queue {queue_name!r}\n"), done.stderr
    assert left(pg_dsn, schema, queue_name)[("dead", True)] == 2  # dead: no retention, kept

    seed(pg_dsn, schema, queue_name)  # old dead: 2 kept above and 2 more
    dead = prune_cli(schema, queue_name, "--state", "dead", "--older-than", "30m")
    assert dead.stdout == f"pruned 4 dead jobs older than 30m from queue {queue_name!r}\n"
    both = prune_cli(schema, queue_name, "--older-than", "30s")  # every finished row now
    assert both.stdout.splitlines() == [
        f"pruned 6 done jobs older than 30s from queue {queue_name!r}",
        f"pruned 4 dead jobs older than 30s from queue {queue_name!r}"], both.stderr
    assert left(pg_dsn, schema, queue_name) == {("pending", None): 4, ("running", None): 4}

    bad = prune_cli(schema, queue_name, "--older-than", "soon")
    assert bad.returncode == 2 and "argument --older-than: expected a duration" in bad.stderr


@pytest.mark.parametrize(("key", "value", "words"), [
    ("DONE", "1 week", "expected a duration like 30s"), ("DEAD", "0", "more than 0"),
    ("INTERVAL", "null", "expected a duration"), ("BATCH", "0", "between 1 and 100000")])
def test_a_bad_retention_stops_the_consumer_naming_the_key(
        schema: str, queue_name: str, key: str, value: str, words: str) -> None:
    result = run_cli("consumer", *pg_args(queue_name), "-p", "noop", "--once",
                     env=schema_env(schema, **{f"JOBQ_POSTGRES__RETENTION__{key}": value}))
    assert result.returncode == 2, result
    assert f"postgres.retention.{key.lower()}: " in result.stderr and words in result.stderr


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_running_consumers_prune_what_they_finished(
        claim: str, pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce = run_cli("producer", *pg_args(queue_name), "--count", "30", env=schema_env(schema))
    assert produce.returncode == 0, produce.stderr
    failing = run_cli("producer", *pg_args(queue_name), "--count", "5", "--kind", "bad",
                      env=schema_env(schema))
    assert failing.returncode == 0, failing.stderr
    later = run_cli("producer", *pg_args(queue_name), "--count", "3", "--delay", "3600",
                    env=schema_env(schema))  # pending all along: never pruned
    assert later.returncode == 0, later.stderr
    env = schema_env(schema, JOBQ_POSTGRES__RETENTION__DONE="1s",
                     JOBQ_POSTGRES__RETENTION__DEAD="2s", JOBQ_POSTGRES__RETENTION__INTERVAL="0.5")
    consumers = [start_cli("consumer", *pg_args(queue_name), "--claim", claim, "-p",
                           "tests.processors:record", "-a", f"directory={tmp_path}",
                           "-a", "fail_kind=bad", env=env) for _ in range(2)]
    try:
        started = time.monotonic()
        assert wait_until(lambda: left(pg_dsn, schema, queue_name) == {("pending", None): 3}, 20), \
            left(pg_dsn, schema, queue_name)
        assert time.monotonic() - started >= 2.0  # the dead ones waited for their 2 s
    finally:
        outputs = []
        for proc in consumers:
            proc.terminate()
            outputs.append(proc.communicate(timeout=30))
    assert [proc.returncode for proc in consumers] == [0, 0], outputs
    logs = "".join(err for _, err in outputs)
    assert "pruned queue" in logs and "failed" not in logs, logs



class Slow(Pruner):
    """A pruner whose DELETEs take 0.8 ms a row (large rows), against a deadline of 1 s. Its
    clock is the statements' simulated time alone, so a loaded machine cannot move its batches."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.now = 0.0
        super().__init__(*args, clock=lambda: self.now, **kwargs)

    async def _execute(self, conn: Any, name: str, params: dict[str, Any]) -> Any:
        if name == "prune":
            if params["batch"] >= 1000:  # would take 1 s: the deadline cuts it
                raise ConnectionLost("postgres prune: no answer from PostgreSQL within 1s")
            self.now += params["batch"] * 0.0008
        return await super()._execute(conn, name, params)


async def test_batches_shrink_to_fit_the_statement_deadline_and_grow_back(
        pool: Any, pg_dsn: str, schema: str, queue_name: str) -> None:
    insert(pg_dsn, schema, queue_name, "done", OLD, 2000)
    settings = PostgresConfig(schema=schema, network_timeout=1.0,
                              retention=RetentionConfig(done=3600))
    slow = Slow(pool, settings, queue=queue_name)
    with pytest.raises(ConnectionLost):  # 1,000 rows outlast the deadline: the round fails ...
        await slow.round()
    assert slow.batch == 500  # ... and the next one starts with half
    # (once the server has ended the failed round's session, and its lock with it)
    assert wait_until(lambda: not advisory_locks(pg_dsn, schema, queue_name), 5)
    # 500 rows took 0.4 s, over a quarter of the deadline: 250 from then on (0.2 s each).
    assert await slow.round() == {"done": 2000} and slow.batch == 250

    insert(pg_dsn, schema, queue_name, "done", OLD, 2000)
    quick = Pruner(pool, settings, queue=queue_name, clock=lambda: 0.0)  # each DELETE instant
    quick.batch = 125  # as a slow round left it
    assert await quick.round() == {"done": 2000} and quick.batch == 1000  # doubled back
