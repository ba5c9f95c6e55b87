"""Transaction mode with handlers that misuse the job's transaction, COMMITs that fail, and a
job that kills its consumer: each ends as a failure of its own, explained, never buried unrun."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobq import Job
from jobq.config import load_settings
from jobq.core.within import within
from jobq.transports.postgres.claims import GRACE
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.transaction import PgTransactionTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from jobq.worker.stats import PoolStats
from tests.conftest import ROOT, fetch, pg_args, run_cli, schema_env
from tests.integration.test_pg_transaction import TXN, effects, effects_table, table
from tests.integration.test_postgres import produce, status_counts
from tests.processors import completions

FIX = "use `async with job.context.transaction():` for a savepoint"


def job_row(dsn: str, schema: str) -> tuple[object, ...]:
    """status, attempts, last_error and seconds from now to run_at of the only job."""
    rows = fetch(dsn, sql.SQL("SELECT status, attempts, last_error, "
                              "extract(epoch FROM run_at - now()) FROM {}").format(table(schema)))
    assert len(rows) == 1
    return rows[0]


def fetch_none(dsn: str, statement: sql.Composable) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def consume(queue: str, schema: str, *args: str, **env: str) -> str:
    """One ``consumer --once`` in transaction mode; its stderr (it must exit 0)."""
    result = run_cli("consumer", *pg_args(queue), *TXN, "--once", "-n", "1", *args,
                     env=schema_env(schema, JOBQ_RETRY__JITTER="false", **env), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stderr


async def drain_in_process(schema: str, queue: str, handler: Callable[[Job], Awaitable[None]],
                           *, concurrency: int, pool_size: int, base_delay: float,
                           job_timeout: float, **postgres: Any) -> PoolStats:
    """A --once drain of ``queue`` in transaction mode by a WorkerPool in this process, on a
    pool of ``pool_size`` connections (``postgres``: more postgres.* settings); its stats."""
    settings = load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.schema": schema, "postgres.claim": "transaction",
        "consumer.concurrency": concurrency,
        **{f"postgres.{key}": value for key, value in postgres.items()}})
    pool = await open_pool(settings.postgres.dsn, settings.connect, pool_size,
                           logging.getLogger("test"), min_size=2,
                           network_timeout=settings.postgres.network_deadline)
    transport = PgTransactionTransport(pool, settings.postgres, settings.connect,
                                       queue=queue, concurrency=concurrency, once=True)
    try:
        await transport.open()
        stats = await WorkerPool(transport, handler, RetryPolicy(base_delay=base_delay, jitter=False),
                                 concurrency=concurrency, buffer_size=0, job_timeout=job_timeout,
                                 shutdown_timeout=5.0, once=True).run()
        await transport.close()
    finally:
        await pool.close()
    return stats


def deferred_children(dsn: str, schema: str) -> sql.Composed:
    """Tables parents and children, whose foreign key is checked at COMMIT; children."""
    parents, children = table(schema, "parents"), table(schema, "children")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(parents))
        conn.execute(sql.SQL("CREATE TABLE {} (parent int REFERENCES {} "
                             "DEFERRABLE INITIALLY DEFERRED)").format(children, parents))
    return children


def fifth_commits_fail(children: sql.Composed) -> Callable[[Job], Awaitable[None]]:
    """A handler whose job's COMMIT fails for every fifth job id (a child of no parent)."""
    insert = sql.SQL("INSERT INTO {} VALUES (1)").format(children)

    async def handler(job: Job) -> None:
        if int(job.id) % 5 == 0:
            await job.context.execute(insert)
        await asyncio.sleep(0.001)

    return handler


def fifth_commits_failed(dsn: str, schema: str, queue: str, children: sql.Composed) -> None:
    """After a drain of 600 jobs by ``fifth_commits_fail``: each failed job retried once with
    its COMMIT's error, every other done at attempts 1, no child row left."""
    assert status_counts(dsn, schema, queue) == {"done": 480, "pending": 120}
    rows = fetch(dsn, sql.SQL("SELECT id %% 5 = 0, status, attempts, last_error FROM {}")
                 .format(table(schema)))
    for poisoned, status, attempts, error in rows:
        assert (status, attempts) == (("pending", 1) if poisoned else ("done", 1)), error
        assert not poisoned or "ForeignKeyViolation" in str(error), error
    assert fetch(dsn, sql.SQL("SELECT count(*) FROM {}").format(children)) == [(0,)]


@pytest.mark.parametrize("fail", ["", "fail"])
@pytest.mark.parametrize("how", ["commit", "rollback"])
def test_commit_and_rollback_of_job_context_are_refused_naming_the_way(
        pg_dsn: str, schema: str, queue_name: str, how: str, fail: str) -> None:
    target = effects_table(pg_dsn, schema)
    produce(schema, queue_name, 1, "--max-attempts", "3")
    consume(queue_name, schema, "-p", "tests.processors:end_transaction", "-a", f"table={target}",
            "-a", f"how={how}", "-a", f"fail={fail}", JOBQ_RETRY__BASE_DELAY="30")
    status, attempts, error, wait = job_row(pg_dsn, schema)
    assert (status, attempts) == ("pending", 1)  # retried, never done
    assert f"TransactionOwned: job.context.{how}() is refused" in str(error), error
    assert FIX in str(error)
    assert 25 < float(wait) <= 30  # type: ignore[arg-type]  # with the policy's backoff
    assert sum(effects(pg_dsn, schema).values()) == 0  # the handler's write rolled back


@pytest.mark.parametrize("fail", ["", "fail"])
@pytest.mark.parametrize("abandoned", [False, True])
def test_a_commit_statement_through_job_context_is_a_failure_never_done(
        pg_dsn: str, schema: str, queue_name: str, fail: str, abandoned: bool) -> None:
    # A COMMIT the proxy cannot see: the job's done mark is committed with the handler's write.
    # Abandoned: the job comes back from a consumer that died running it, so its pick counts
    # its start, not its take; the failure is recorded on the row all the same.
    target = effects_table(pg_dsn, schema)
    produce(schema, queue_name, 1, "--max-attempts", "2")
    if abandoned:
        fetch_none(pg_dsn, sql.SQL("UPDATE {} SET locked_until = now() - interval '1 second', "
                                   "locked_by = 'gone:1:x'").format(table(schema)))
    env = {"JOBQ_RETRY__BASE_DELAY": "0"}
    args = ("-p", "tests.processors:end_transaction", "-a", f"table={target}",
            "-a", "how=execute", "-a", f"fail={fail}")
    consume(queue_name, schema, *args, **env)
    status, attempts, error, _ = job_row(pg_dsn, schema)
    assert (status, attempts) == ("pending", 1), error  # corrected: failed work is not done
    expected = ("ValueError: failed after execute" if fail
                else "TransactionOwned: the handler ended the job's transaction")
    assert expected in str(error), error
    consume(queue_name, schema, *args, **env)
    status, attempts, error, _ = job_row(pg_dsn, schema)
    assert (status, attempts) == ("dead", 2), error
    assert "gave up after 2 of 2 attempts" in str(error)
    assert sum(effects(pg_dsn, schema).values()) == 2  # committed by the handler: not undoable


@pytest.mark.parametrize("how", ["deferred", "idle", "swallowed"])
def test_a_failed_commit_is_retried_with_backoff_then_dead_with_its_real_error(
        pg_dsn: str, schema: str, queue_name: str, how: str) -> None:
    children = deferred_children(pg_dsn, schema)
    produce(schema, queue_name, 1, "--max-attempts", "3")
    args = ("-p", "tests.processors:fail_at_commit", "-a", f"how={how}",
            "-a", f"table={schema}.children")
    real = {"deferred": "ForeignKeyViolation: insert or update on table \"children\" violates",
            "idle": "IdleInTransactionSessionTimeout: terminating connection due to idle-in",
            "swallowed": "CommitFailed: the job's transaction was aborted by a statement that "
                         "failed in the handler"}[how]
    consume(queue_name, schema, *args, JOBQ_RETRY__BASE_DELAY="2")
    status, attempts, error, wait = job_row(pg_dsn, schema)
    assert (status, attempts) == ("pending", 1), error
    assert real in str(error), error
    assert 0 < float(wait) <= 2  # type: ignore[arg-type]  # backoff: base_delay after attempt 1
    due = sql.SQL("UPDATE {} SET run_at = now()").format(table(schema))
    for _ in range(4):
        fetch_none(pg_dsn, due)  # the backoff was seen: skip the waits
        consume(queue_name, schema, *args, JOBQ_RETRY__BASE_DELAY="2")
        if job_row(pg_dsn, schema)[0] == "dead":
            break
    status, attempts, error, _ = job_row(pg_dsn, schema)
    assert (status, attempts) == ("dead", 3), error
    assert real in str(error) and "gave up after 3 of 3 attempts" in str(error), error
    assert "consumer died" not in str(error)
    assert fetch(pg_dsn, sql.SQL("SELECT count(*) FROM {}").format(children)) == [(0,)]


@pytest.mark.slow
def test_a_job_that_kills_its_consumer_ends_dead_alone_its_batch_mates_done(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 10, "--max-attempts", "3")
    produce(schema, queue_name, 1, "--kind", "poison", "--max-attempts", "3")
    produce(schema, queue_name, 10, "--max-attempts", "3")
    exits = []
    for _ in range(8):
        result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "1",
                         "-p", "tests.processors:poison", "-a", f"directory={tmp_path}",
                         env=schema_env(schema), timeout=60)
        exits.append(result.returncode)
        if result.returncode == 0 and "pending" not in status_counts(pg_dsn, schema, queue_name):
            break
        time.sleep(GRACE)  # a job picked by a process that died is passed over for that long
    assert exits.count(137) == 4, exits  # one uncounted, then one per attempt, no more
    rows = fetch(pg_dsn, sql.SQL("SELECT kind, status, attempts, last_error FROM {}")
                 .format(table(schema)))
    [(_, status, attempts, error)] = [r for r in rows if r[0] == "poison"]
    assert (status, attempts) == ("dead", 3)
    assert "the consumer died or lost its connection during each of its 3 attempts" in str(error)
    innocent = [r for r in rows if r[0] != "poison"]
    assert len(innocent) == 20
    assert all(r[1:3] == ("done", 1) for r in innocent), innocent  # one run each, no attempt spent
    assert len(completions(tmp_path)) == 20


def test_many_failed_commits_each_give_their_connection_back_once(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """A COMMIT that fails is recorded apart, on a connection of its own, after the job's went
    back to the pool. Before, the settle then gave the job's connection back a second time, by
    then held by another job: that job's transaction rolled back under it (retried as
    TransactionOwned) or its connection closed mid-statement, and the drain hung."""
    children = deferred_children(pg_dsn, schema)
    produce(schema, queue_name, 600)
    handler = fifth_commits_fail(children)

    drained = drain_in_process(schema, queue_name, handler, concurrency=8, pool_size=10,
                               base_delay=60.0, job_timeout=5.0, pick_ahead=False)
    assert asyncio.run(within(drained, 60.0)).ok == 480
    fifth_commits_failed(pg_dsn, schema, queue_name, children)


def test_a_commit_the_server_cut_off_costs_the_job_no_attempt(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """The server ends a job's connection (pg_terminate_backend; a restart says the same) while
    its handler runs: the COMMIT fails, not by the job's doing. It runs again at once with its
    attempt uncounted. Before, that was a failed attempt (CommitFailed, retried with backoff),
    and under pg_terminate_backend twice a second jobs died of it (make chaos-steady)."""
    produce(schema, queue_name, 1)
    runs: list[int] = []

    async def cut_once(job: Job) -> None:
        runs.append(job.attempt)
        if len(runs) > 1:
            return
        assert job.context is not None
        pid = (await (await job.context.execute("SELECT pg_backend_pid()")).fetchone())[0]
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as other:
            # With a timeout, PostgreSQL 14+ returns once that backend has exited (false if
            # it had not within 5 s).
            ended = await (await other.execute("SELECT pg_terminate_backend(%s, 5000)",
                                               (pid,))).fetchone()
            assert ended == (True,), ended

    asyncio.run(within(drain_in_process(schema, queue_name, cut_once, concurrency=1,
                                        pool_size=4, base_delay=0.1, job_timeout=10.0), 60.0))
    status, attempts, _, _ = job_row(pg_dsn, schema)
    assert (status, attempts, runs) == ("done", 1, [1, 1]), (status, attempts, runs)
