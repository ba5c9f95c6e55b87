"""The Postgres transaction claim mode against the real server, driven through the real CLIs."""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.transports.postgres.claims import GRACE, ClaimStatement, Sweep
from jobq.transports.postgres.held import pairs
from jobq.transports.postgres.sql import Queries
from tests.conftest import consuming, fetch, pg_args, run_cli, schema_env, start_cli, wait_until
from tests.integration.test_postgres import produce, status_counts
from tests.processors import completions

TXN = ("--claim", "transaction")
RECORD = "tests.processors:record"
EFFECT = "tests.processors:effect"


def table(schema: str, name: str = "jobs") -> sql.Composed:
    return sql.SQL("{}").format(sql.Identifier(schema, name))



def effects_table(dsn: str, schema: str) -> str:
    """A table for effect rows, beside the jobs (no key: a doubled effect must show)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (job_id bigint NOT NULL, attempt int NOT NULL)")
                     .format(table(schema, "effects")))
    return f"{schema}.effects"


def effects(dsn: str, schema: str) -> collections.Counter[int]:
    rows = fetch(dsn, sql.SQL("SELECT job_id FROM {}").format(table(schema, "effects")))
    return collections.Counter(int(r[0]) for r in rows)  # type: ignore[call-overload]



def test_four_instances_sweep_5000_jobs_exactly_once(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 5000)
    # `record` is a lease-mode handler that ignores job.context: it runs unchanged here.
    procs = [start_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-p", RECORD,
                       "-a", f"directory={tmp_path}", "-n", "4", env=schema_env(schema))
             for _ in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    done = completions(tmp_path)
    assert len(done) == 5000 and len(set(done)) == 5000  # none lost, none twice
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 5000}
    assert len(list(tmp_path.glob("*.log"))) >= 2  # they shared the work
    attempts = fetch(pg_dsn, sql.SQL("SELECT DISTINCT attempts FROM {}").format(table(schema)))
    assert attempts == [(1,)]


def test_effects_commit_with_success_and_roll_back_with_failure(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    target = effects_table(pg_dsn, schema)
    produce(schema, queue_name, 3, "--kind", "good")
    produce(schema, queue_name, 2, "--kind", "bad", "--max-attempts", "3")
    env = schema_env(schema, JOBQ_RETRY__BASE_DELAY="1", JOBQ_RETRY__JITTER="false")
    result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-p", EFFECT, "-n", "5",
                     "-a", f"table={target}", "-a", "fail_kind=bad", "-a", "sleep_ms=600", env=env)
    assert result.returncode == 0, result.stderr
    rows = fetch(pg_dsn, sql.SQL("SELECT id, kind, status, attempts, last_error FROM {} ORDER BY id")
                 .format(table(schema)))
    good = [r for r in rows if r[1] == "good"]
    bad = [r for r in rows if r[1] == "bad"]
    assert all(r[2:4] == ("done", 1) for r in good)
    assert all(r[2:4] == ("pending", 1) for r in bad)  # retried, attempt counted
    assert all("ValueError: kind bad fails after writing its effect" in str(r[4]) for r in bad)
    assert effects(pg_dsn, schema) == collections.Counter(int(r[0]) for r in good)  # type: ignore[call-overload]
    waits = fetch(pg_dsn, sql.SQL("SELECT extract(epoch FROM run_at - created_at) FROM {} "
                                  "WHERE kind = 'bad'").format(table(schema)))
    assert all(float(w) >= 1.6 for (w,) in waits)  # type: ignore[arg-type]  # 1 s from the failure, not the claim


def test_kill_9_mid_sweep_leaves_exactly_one_effect_per_job(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    target = effects_table(pg_dsn, schema)
    produce(schema, queue_name, 2000)
    app = f"jobq-victim-{uuid.uuid4().hex[:8]}"
    victim = start_cli("consumer", *pg_args(queue_name), *TXN, "-p", EFFECT, "-a", f"table={target}",
                       "-a", "sleep_ms=5", "-n", "8", env=schema_env(schema, PGAPPNAME=app))
    assert wait_until(lambda: sum(effects(pg_dsn, schema).values()) >= 300, 30)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The server rolls the dead consumer's transactions back as it notices each connection gone.
    gone = sql.SQL("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s")
    assert wait_until(lambda: fetch(pg_dsn, gone, [app]) == [(0,)], 10)
    assert status_counts(pg_dsn, schema, queue_name).get("pending", 0) > 0
    time.sleep(GRACE)  # the jobs it had just picked are passed over for that long
    result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-p", EFFECT,
                     "-a", f"table={target}", env=schema_env(schema))
    assert result.returncode == 0, result.stderr
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 2000}
    counts = effects(pg_dsn, schema)
    assert len(counts) == 2000 and set(counts.values()) == {1}  # none missing, none doubled
    # The jobs it died running ran again; its death cost them no attempt (it did, before).
    tally = fetch(pg_dsn, sql.SQL("SELECT attempts, count(*) FROM {} GROUP BY 1").format(table(schema)))
    assert tally == [(1, 2000)]


def test_a_sweep_over_500_failing_jobs_ends_with_each_attempted_once(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 500)
    env = schema_env(schema, JOBQ_RETRY__BASE_DELAY="0")  # each failure is due again at once
    result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "16",
                     "-p", "tests.processors:fail_recording", "-a", f"directory={tmp_path}",
                     env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    tried = [line.split()[0] for f in tmp_path.glob("*.attempts") for line in f.read_text().splitlines()]
    assert len(tried) == 500 and len(set(tried)) == 500
    rows = fetch(pg_dsn, sql.SQL("SELECT DISTINCT status, attempts FROM {}").format(table(schema)))
    assert rows == [("pending", 1)]


def test_two_instances_sweeping_failing_jobs_both_end(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 500)
    env = schema_env(schema, JOBQ_RETRY__BASE_DELAY="0")
    procs = [start_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "4",
                       "-p", "tests.processors:fail_recording", "-a", f"directory={tmp_path}", env=env)
             for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    per_instance = [[line.split()[0] for line in f.read_text().splitlines()]
                    for f in tmp_path.glob("*.attempts")]
    assert all(len(ids) == len(set(ids)) for ids in per_instance)  # once per job per sweep
    tried = collections.Counter(i for ids in per_instance for i in ids)
    assert len(tried) == 500  # each sweep saw every job it reached; together, all of them
    total = fetch(pg_dsn, sql.SQL("SELECT sum(attempts) FROM {}").format(table(schema)))
    assert total[0][0] == sum(tried.values())  # every attempt counted, none invented


def test_too_small_a_pool_warns_at_start_and_still_drains(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 50)
    result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "4", "-p", RECORD,
                     "-a", f"directory={tmp_path}", env=schema_env(schema, JOBQ_POSTGRES__POOL_SIZE="3"))
    assert result.returncode == 0, result.stderr
    assert "postgres.pool_size 3 is too small for transaction mode with concurrency 4" in result.stderr
    assert "at most 2 jobs will run at once; set pool_size to 5 or more" in result.stderr
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 50}


def test_a_running_consumer_wakes_for_new_jobs_and_stops_cleanly_on_sigterm(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    proc = start_cli("consumer", *pg_args(queue_name), *TXN, "-p", RECORD, "-a", f"directory={tmp_path}",
                     "-n", "4", env=schema_env(schema, JOBQ_POSTGRES__POLL_INTERVAL="3"))
    err = consuming(proc)  # idle and listening; a 3 s poll would miss the deadline below
    try:
        produce(schema, queue_name, 20)
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"done": 20}, 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, err.text()
    assert sorted(completions(tmp_path)) == sorted(
        str(i) for (i,) in fetch(pg_dsn, sql.SQL("SELECT id FROM {}").format(table(schema))))
    assert "stopped: ok=20" in err.text()


def test_the_claim_survives_its_prepared_statement_going_missing(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 30)
    result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "1",
                     "-p", "tests.processors:deallocate", env=schema_env(schema))
    assert result.returncode == 0, result.stderr
    assert "claiming with plain statements from now on" in result.stderr  # it fell back, once
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 30}


def test_the_claim_reads_only_its_own_queue_whatever_the_plan(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    # Another queue's jobs hold the lower ids; ours are a third of the table, so a plan that
    # bets on finding one of ours among the first ids it reads looks cheap, and is not.
    produce(schema, f"{queue_name}-other", 3000)
    produce(schema, queue_name, 1500)
    claim = Queries(schema)["txn_pick"]
    params = {"queue": queue_name, "after_run_at": datetime.min.replace(tzinfo=UTC), "after_id": 0,
              "until": datetime.now(UTC), "limit": 8, "grace": GRACE, "worker": "test"}
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(table(schema)))
        conn.commit()
        for mode in ("force_custom_plan", "force_generic_plan"):  # each picks, then rolls back
            conn.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.Literal(mode)))
            explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ") + claim
            plan = "\n".join(str(r[0]) for r in conn.execute(explain, params, prepare=True))
            assert "jobs_pending_idx" in plan and "Rows Removed by Filter" not in plan, plan
            conn.rollback()


@pytest.mark.parametrize("again_by", ["another consumer", "the same consumer"])
def test_a_take_after_its_job_was_picked_again_matches_nothing_and_never_waits(
        pg_dsn: str, schema: str, queue_name: str, again_by: str) -> None:
    # A take that comes after its pick's moment (an event loop blocked that long) finds the
    # job picked again and taken, its row locked by that take's transaction. It must match
    # nothing at once, not wait for that job to end and then run it a second time.
    produce(schema, queue_name, 1)
    queries, log = Queries(schema), logging.getLogger("test")
    late = ClaimStatement(queries, log, "late:1:aaaaaa")
    other = late if again_by == "the same consumer" else ClaimStatement(queries, log, "other:2:bbbbbb")
    expire = sql.SQL("UPDATE {} SET locked_until = now() - interval '1 second'").format(table(schema))

    async def go() -> tuple[bool, bool]:
        async with (await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as first,
                    await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as second):
            [picked] = await late.pick(first, Sweep(None, 0.0), queue_name, 4)
            await second.execute(expire)  # the pick's moment passes
            [again] = await other.pick(second, Sweep(None, 0.0), queue_name, 4)
            second_took = await other.take(second, again)
            first_took = await asyncio.wait_for(late.take(first, picked), 5)
            await first.rollback()
            await second.commit()
            return first_took, second_took

    first_took, second_took = asyncio.run(go())
    assert (first_took, second_took) == (False, True)
    rows = fetch(pg_dsn, sql.SQL("SELECT status, attempts FROM {}").format(table(schema)))
    assert rows == [("done", 1)]  # run once, counted once: a pick counts no start it never took


def test_picks_and_heartbeats_are_hot_updates(pg_dsn: str, schema: str, queue_name: str) -> None:
    # They change no indexed column (migration 3), so on a page with room they add no index
    # entries: updates and HOT updates as the server counts them for this session.
    produce(schema, queue_name, 20)
    hot = sql.SQL("SELECT pg_stat_get_xact_tuples_updated(t), pg_stat_get_xact_tuples_hot_updated(t)"
                  " FROM CAST({} AS regclass) AS t").format(sql.Literal(f"{schema}.jobs"))
    claim = ClaimStatement(Queries(schema), logging.getLogger("test"), "hot:1:aaaaaa")

    async def pick() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            before = (await (await conn.execute(hot)).fetchall())[0]
            assert len(await claim.pick(conn, Sweep(None, 0.0), queue_name, 10)) == 10
            after = (await (await conn.execute(hot)).fetchall())[0]
            await conn.rollback()
            return after[0] - before[0], after[1] - before[1]

    assert asyncio.run(pick()) == (10, 10)
    with psycopg.connect(pg_dsn) as conn:
        running = conn.execute(sql.SQL(
            "UPDATE {} SET status = 'running', locked_by = 'w', locked_until = now() + interval '1 minute'"
            " WHERE id IN (SELECT id FROM {} LIMIT 5)"
            " RETURNING id").format(table(schema), table(schema))).fetchall()
        conn.commit()
        before = conn.execute(hot).fetchall()[0]
        conn.execute(Queries(schema)["heartbeat"],
                     {**pairs([(int(r[0]), "w") for r in running]), "lease": 60.0})
        after = conn.execute(hot).fetchall()[0]
    assert (after[0] - before[0], after[1] - before[1]) == (5, 5)
