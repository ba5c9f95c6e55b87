"""Lease mode when a job kills its consumer, a lease is lost, or a reason cannot be stored.

Issue 19, items 2, 4, 8 and 9, against the real server: a poison job uses up its own attempts
only (its batch-mates spend none), every settle and heartbeat is fenced to its claim, a dead
consumer's jobs come back within about 15 s by default, and a NUL in a reason is stored.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from jobq.config import ConnectConfig, PostgresConfig, load_settings
from jobq.core.job import Ack, Dead, RetryIn
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.lease import PostgresTransport
from tests.conftest import (
    ROOT,
    consuming,
    fetch,
    pg_args,
    run_cli,
    schema_env,
    start_cli,
    until,
    wait_until,
)
from tests.processors import completions

POISON = "tests.processors:poison"


def jobs(schema: str) -> sql.Composed:
    return sql.SQL("{}").format(sql.Identifier(schema, "jobs"))


def rows(dsn: str, schema: str, queue: str) -> dict[int, tuple[Any, ...]]:
    """id -> (kind, status, attempts, last_error, locked_by, locked_until > now())."""
    q = sql.SQL("SELECT id, kind, status, attempts, last_error, locked_by, locked_until > now() "
                "FROM {} WHERE queue = %s").format(jobs(schema))
    return {int(r[0]): r[1:] for r in fetch(dsn, q, [queue])}  # type: ignore[call-overload]


def produce(schema: str, queue: str, count: int, *extra: str) -> None:
    result = run_cli("producer", *pg_args(queue), "--count", str(count), *extra, env=schema_env(schema))
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_poison_job_dies_alone_and_its_batch_mates_spend_no_attempt(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 5, "--max-attempts", "3")
    produce(schema, queue_name, 1, "--kind", "poison", "--max-attempts", "3")
    produce(schema, queue_name, 15, "--max-attempts", "3")
    env = schema_env(schema, JOBQ_POSTGRES__LEASE="1", JOBQ_POSTGRES__RESCUE_INTERVAL="0.2",
                     JOBQ_CONSUMER__BUFFER="10")
    exits, logs = [], []
    for _ in range(12):
        proc = run_cli("consumer", *pg_args(queue_name), "-p", POISON, "-a", f"directory={tmp_path}",
                       "-a", "min_ms=100", "-a", "max_ms=300",
                       "-n", "1", "--max-attempts", "3", "--once", env=env, timeout=60)
        exits.append(proc.returncode)
        logs.append(proc.stderr)
        assert proc.returncode in (0, 137), proc.stderr
        left = [r for r in rows(pg_dsn, schema, queue_name).values() if r[1] in ("pending", "running")]
        if not left:
            break
        time.sleep(1.3)  # let the dead consumer's leases expire; the next one rescues them
    final = rows(pg_dsn, schema, queue_name)
    poison = [r for r in final.values() if r[0] == "poison"]
    innocent = {i: r for i, r in final.items() if r[0] != "poison"}
    assert len(poison) == 1 and len(innocent) == 20
    statuses = collections.Counter(r[1] for r in innocent.values())
    assert statuses == {"done": 20}, (statuses, exits, logs)
    assert {r[2] for r in innocent.values()} == {1}, innocent  # not one attempt spent on a crash
    _, status, attempts, error, *_ = poison[0]
    assert (status, attempts) == ("dead", 3), (poison, exits, logs)
    assert "lease expired on attempt 3 of 3" in str(error) and "alone" in str(error), error
    assert set(map(int, completions(tmp_path))) == set(innocent)
    # One run in its batch (not counted: its batch-mates were in flight), then three alone.
    runs = (tmp_path / "poison.runs").read_text().split("\n")
    assert len([r for r in runs if r]) == 4, runs
    assert exits.count(137) == 4, exits


def test_a_once_sweep_runs_every_crash_suspect_one_after_the_other(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    """Suspects run one at a time: the next may be claimed once the last one's ack is written.
    Before, an idle ``--once`` consumer's claim came back empty while that ack waited for its
    flush, and the sweep ended "nothing left to do" with the other suspects pending (under
    load the poison test above then ran out of consumers before the poison was dead)."""
    produce(schema, queue_name, 4)
    fetch(pg_dsn, sql.SQL("UPDATE {} SET isolate = true WHERE queue = %s RETURNING id").format(jobs(schema)),
          [queue_name])
    # An ack interval no claim can beat: the suspect's ack waits for it unless it is flushed.
    env = schema_env(schema, JOBQ_POSTGRES__ACK_INTERVAL="2")
    done = run_cli("consumer", *pg_args(queue_name), "-p", "noop", "--once", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    statuses = collections.Counter(r[1] for r in rows(pg_dsn, schema, queue_name).values())
    assert statuses == {"done": 4}, (statuses, done.stderr)


def lease_transport(pool: Any, schema: str, queue: str, **settings: Any) -> PostgresTransport:
    cfg = PostgresConfig(schema=schema, notify=False, **settings)
    return PostgresTransport(pool, cfg, ConnectConfig(), queue=queue,
                             logger=logging.getLogger("test.lease"))


def acks_written(transport: PostgresTransport) -> bool:
    """No ack waits for the flusher and no flush is under way: every ack queued is written
    (or found stale). A queued ack moves from ``waiting`` to ``flushing`` in one step."""
    return not transport._acks.waiting and not transport._state.held.flushing


async def test_a_stale_delivery_never_settles_a_newer_claim_and_a_lost_lease_is_dropped(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 1)
    pool = await open_pool(pg_dsn, ConnectConfig(), 4, logging.getLogger("test.lease"),
                           network_timeout=PostgresConfig().network_deadline)
    # A 2 s lease (1 s statement deadline): with 1 s, one heartbeat slowed past its 0.5 s
    # deadline on a loaded machine let the lease lapse (seen once in a full run).
    t = lease_transport(pool, schema, queue_name, lease=2.0, heartbeat=0.2, rescue_interval=100)
    try:
        await t.open()
        [old] = await t.receive(1, 2)
        job_id = int(old.job.id)
        # Its lease expires as if the event loop had been blocked, and another consumer rescues it.
        fetch(pg_dsn, sql.SQL("UPDATE {} SET locked_until = now() - interval '1 second' RETURNING id")
              .format(jobs(schema)))
        rescuer = lease_transport(pool, schema, queue_name, rescue_interval=100)
        await rescuer.open()
        await rescuer.close()
        assert rows(pg_dsn, schema, queue_name)[job_id][1] == "pending"
        # The next heartbeat finds the lease gone: the consumer stops holding the job.
        assert await asyncio.to_thread(wait_until, lambda: t.leases_lost == 1, 5)
        # The same consumer claims the job again; the old delivery's outcomes must not touch it.
        [new] = await t.receive(1, 2)
        # Its consumer's only job: the lost lease counts against it, and it now runs alone.
        assert (int(new.job.id), new.job.attempt, new.isolate) == (job_id, 2, True)
        await t.settle(old, Dead("PermanentError: from the stale delivery"))
        await t.settle(old, Ack())
        # An ack queued (one the fence let through) is written by the flusher up to
        # ack_interval later, or never: look once none waits and none is being written.
        await until(lambda: acks_written(t), "the stale ack's flush, if any", 10)
        _, status, attempts, error, locked_by, _ = rows(pg_dsn, schema, queue_name)[job_id]
        assert (status, attempts) == ("running", 2) and locked_by
        assert "stale delivery" not in str(error)
        # The new claim is still heartbeated after the stale settles: alive past its lease.
        await asyncio.sleep(2.5)
        assert rows(pg_dsn, schema, queue_name)[job_id][5] is True
        await t.settle(new, Ack())
        await until(lambda: acks_written(t), "the new delivery's ack flush", 10)
        assert rows(pg_dsn, schema, queue_name)[job_id][1:3] == ("done", 2)
    finally:
        await t.close()
        await pool.close()


async def test_a_nul_or_a_lone_surrogate_in_a_reason_is_stored_without_it(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 2, "--max-attempts", "1")
    pool = await open_pool(pg_dsn, ConnectConfig(), 4, logging.getLogger("test.lease"),
                           network_timeout=PostgresConfig().network_deadline)
    t = lease_transport(pool, schema, queue_name)
    try:
        await t.open()
        first, second = await t.receive(2, 2)
        await t.settle(first, RetryIn(30.0, "ValueError: a\x00b"))
        await t.settle(second, Dead("OSError: /in/\udcff.csv\x00"))
    finally:
        await t.close()
        await pool.close()
    got = rows(pg_dsn, schema, queue_name)
    assert got[int(first.job.id)][1:4] == ("pending", 1, "ValueError: ab")
    status, _, error = got[int(second.job.id)][1:4]
    assert status == "dead" and "\x00" not in str(error) and str(error).startswith("OSError: /in/")
    str(error).encode("utf-8")  # no lone surrogate left


def test_a_dead_consumers_jobs_run_again_within_15_s_by_default(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    defaults = PostgresConfig()
    shipped = load_settings(str(ROOT / "configs" / "postgres.yaml"), env={}).postgres
    for cfg in (defaults, shipped):
        # A job is free again at most one lease after the last heartbeat, and some consumer's
        # rescue (every rescue_interval) hands it out at most that much later.
        assert cfg.lease + cfg.rescue_interval <= 15.0, cfg
        assert (cfg.heartbeat or cfg.lease / 3) <= cfg.lease / 3
    # The same rule, run for real at a tenth of the scale.
    produce(schema, queue_name, 40)
    scaled = {"JOBQ_POSTGRES__LEASE": str(defaults.lease / 10),
              "JOBQ_POSTGRES__RESCUE_INTERVAL": str(defaults.rescue_interval / 10)}
    env = schema_env(schema, **scaled)
    victim = start_cli("consumer", *pg_args(queue_name), "-p", "sleep", "-a", "ms=100000", "-n", "4",
                       env=schema_env(schema, JOBQ_CONSUMER__BUFFER="0", **scaled))
    rescuer = None
    try:
        assert wait_until(lambda: sum(r[1] == "running" for r in rows(pg_dsn, schema, queue_name).values())
                          >= 4, 20)
        rescuer = start_cli("consumer", *pg_args(queue_name), "-p", "noop", env=env)
        consuming(rescuer)  # up and idle (it finds nothing pending): its start-up is not counted
        held = {i for i, r in rows(pg_dsn, schema, queue_name).items() if r[1] == "running"}
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        assert wait_until(lambda: all(rows(pg_dsn, schema, queue_name)[i][1] == "done" for i in held), 10)
        took = time.monotonic() - killed_at
        assert took <= (defaults.lease + defaults.rescue_interval) / 10 + 0.5, took
    finally:
        for proc in (victim, rescuer):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=30)

