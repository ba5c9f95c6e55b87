"""``python -m benchmarks.enqueue``: what enqueueing costs, every figure side by side in one run.

Per backend (PostgreSQL; RabbitMQ with a quorum and with a classic queue), through the Python
API in one process on a fresh schema / queue (benchmarks/spaces.py):

- ``one``: ``enqueue`` one job at a time, each awaited (a commit, or a confirm, per job);
- ``batch``: ``enqueue_many`` of BATCH jobs at a time;
- PostgreSQL only, the transactional enqueue (``connection=``, the caller's own transaction):
  ``app`` a transaction that inserts one row of an application table and commits; ``app+job``
  the same transaction enqueueing one job too; ``txn batch``: a transaction enqueueing a batch.
  The cost of enqueueing inside your own transaction is ``app+job`` against ``app``;
- ``relay``: the real ``jobq relay --once`` moving N jobs from a PostgreSQL queue to a RabbitMQ
  queue of each type, its wall time (start-up included) and the rate it logs itself.

Each figure is the median of ``--repeat`` runs, with the lowest and the highest. Conditions
(synchronous_commit, autovacuum, confirms) go into the report beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
from psycopg import sql

from benchmarks.spaces import BIN, PostgresSpace, RabbitSpace, Servers, Space
from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob

BATCH = 1_000
TXN_BATCH = 100
RATE = re.compile(r"jobs_per_second=([0-9.]+)")


def _job(i: int) -> NewJob:
    return NewJob(kind="bench", payload={"n": i})


async def _timed(count: int, run: Callable[[], Awaitable[None]]) -> float:
    began = time.perf_counter()
    await run()
    return count / (time.perf_counter() - began)


async def publisher_rates(space: Space, one: int, many: int) -> dict[str, float]:
    """``one`` and ``batch`` on the space's backend."""
    settings = load_settings(space.config, {"queue": space.queue}, env=space.env)
    async with connect_publisher(settings) as publisher:
        async def singly() -> None:
            for i in range(one):
                await publisher.enqueue(_job(i))

        async def batched() -> None:
            for start in range(0, many, BATCH):
                await publisher.enqueue_many([_job(i) for i in range(start, start + BATCH)])

        return {"one": await _timed(one, singly), "batch": await _timed(many, batched)}


async def transactional_rates(space: PostgresSpace, one: int, many: int) -> dict[str, float]:
    """``app``, ``app+job`` and ``txn batch`` on the space's schema."""
    settings = load_settings(space.config, {"queue": space.queue}, env=space.env)
    app = sql.Identifier(space.schema, "app_rows")
    async with await psycopg.AsyncConnection.connect(space.servers.pg_dsn,
                                                     autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE TABLE {} (id bigint GENERATED ALWAYS AS IDENTITY "
                                   "PRIMARY KEY, note text)").format(app))
        insert = sql.SQL("INSERT INTO {} (note) VALUES (%s)").format(app)
        async with connect_publisher(settings) as publisher:
            async def app_only() -> None:
                for i in range(one):
                    async with conn.transaction():
                        await conn.execute(insert, (f"row {i}",))

            async def app_and_job() -> None:
                for i in range(one):
                    async with conn.transaction():
                        await conn.execute(insert, (f"row {i}",))
                        await publisher.enqueue(_job(i), connection=conn)

            async def txn_batches() -> None:
                for start in range(0, many, TXN_BATCH):
                    async with conn.transaction():
                        await publisher.enqueue_many(
                            [_job(i) for i in range(start, start + TXN_BATCH)], connection=conn)

            return {"app": await _timed(one, app_only), "app+job": await _timed(one, app_and_job),
                    "txn batch": await _timed(many, txn_batches)}


def relay_rate(servers: Servers, queue_type: str, jobs: int) -> dict[str, float]:
    """``jobq relay --once`` over ``jobs`` pending jobs, into a fresh RabbitMQ queue."""
    rabbit = RabbitSpace(servers, {"JOBQ_RABBITMQ__QUEUE_TYPE": queue_type})
    pg = PostgresSpace(servers, {"JOBQ_RABBITMQ__QUEUE_TYPE": queue_type})
    pg.queue = rabbit.queue
    pg.create()
    rabbit.create()
    try:
        settings = load_settings(pg.config, {"queue": pg.queue}, env=pg.env)

        async def fill() -> None:
            async with connect_publisher(settings) as publisher:
                for start in range(0, jobs, BATCH):
                    await publisher.enqueue_many([_job(i) for i in range(start, start + BATCH)])

        asyncio.run(fill())
        began = time.perf_counter()
        done = subprocess.run([str(BIN / "jobq"), "relay", "--config", str(pg.config), "--queue",
                               pg.queue, "--once"], env=pg.env, capture_output=True, text=True,
                              timeout=600)
        wall = time.perf_counter() - began
        if done.returncode != 0 or f"relayed={jobs} " not in done.stderr:
            raise RuntimeError(f"jobq relay failed ({done.returncode}): {done.stderr[-2000:]}")
        logged = RATE.search(done.stderr)
        return {"relay (wall)": jobs / wall, "relay (logged)": float(logged.group(1)) if logged
                else 0.0}
    finally:
        pg.drop()
        rabbit.drop()


def conditions(servers: Servers) -> dict[str, str]:
    """The PostgreSQL settings the figures depend on."""
    with psycopg.connect(servers.pg_dsn) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in ("synchronous_commit", "autovacuum", "fsync", "server_version")}


def one_round(servers: Servers, one: int, many: int, relay_jobs: int) -> dict[str, float]:
    """Every figure once, each on a fresh space."""
    out: dict[str, float] = {}
    spaces: list[tuple[str, Space]] = [
        ("postgres", PostgresSpace(servers)),
        ("rabbitmq-quorum", RabbitSpace(servers, {"JOBQ_RABBITMQ__QUEUE_TYPE": "quorum"})),
        ("rabbitmq-classic", RabbitSpace(servers, {"JOBQ_RABBITMQ__QUEUE_TYPE": "classic"})),
    ]
    for name, space in spaces:
        space.create()
        try:
            for key, rate in asyncio.run(publisher_rates(space, one, many)).items():
                out[f"{name} {key}"] = rate
            if isinstance(space, PostgresSpace):
                for key, rate in asyncio.run(transactional_rates(space, one, many)).items():
                    out[f"{name} {key}"] = rate
        finally:
            space.drop()
    for queue_type in ("quorum", "classic"):
        for key, rate in relay_rate(servers, queue_type, relay_jobs).items():
            out[f"postgres -> rabbitmq-{queue_type} {key}"] = rate
    return out


def render(figures: dict[str, list[float]], conds: dict[str, str], args: argparse.Namespace
           ) -> str:
    """The report: a table of medians with their spread, then the ratios that answer questions."""
    med = {k: statistics.median(v) for k, v in figures.items()}
    lines = [f"# Enqueue rates ({args.repeat} runs each; median, lowest-highest)", "",
             f"one at a time: {args.one:,} jobs; batches: {args.jobs:,} jobs in enqueue_many of "
             f"{BATCH:,} (transactional: {TXN_BATCH}); relay: {args.relay_jobs:,} jobs per queue "
             f"type, batches of 500. PostgreSQL: " + ", ".join(f"{k} {v}" for k, v in conds.items())
             + ". RabbitMQ: publisher confirms on, persistent messages.", "",
             "| figure | jobs/s | spread |", "| --- | ---: | ---: |"]
    for key, values in figures.items():
        lines.append(f"| {key} | {med[key]:,.0f} | {min(values):,.0f}-{max(values):,.0f} |")
    app, both = med.get("postgres app"), med.get("postgres app+job")
    if app and both:
        extra_ms = (1 / both - 1 / app) * 1000
        lines += ["", f"Enqueueing inside your own transaction: a transaction with one app row "
                  f"commits {app:,.0f}/s, with the row and a job {both:,.0f}/s ({both / app:.2f}x; "
                  f"{extra_ms:.3f} ms more per transaction). A plain one-at-a-time enqueue "
                  f"(its own transaction): {med['postgres one']:,.0f}/s."]
    for queue_type in ("quorum", "classic"):
        relay = med.get(f"postgres -> rabbitmq-{queue_type} relay (logged)")
        direct = med.get(f"rabbitmq-{queue_type} batch")
        if relay and direct:
            lines.append(f"Relay to a {queue_type} queue: {relay:,.0f} jobs/s, "
                         f"{relay / direct:.2f}x the batched publish straight to RabbitMQ.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.enqueue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", type=int, default=3_000, help="jobs enqueued one at a time")
    p.add_argument("--jobs", type=int, default=50_000, help="jobs enqueued in batches")
    p.add_argument("--relay-jobs", type=int, default=50_000, help="jobs relayed per queue type")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="benchmark-results/enqueue")
    args = p.parse_args(argv)
    servers = Servers.from_env()
    figures: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for key, rate in one_round(servers, args.one, args.jobs, args.relay_jobs).items():
            figures.setdefault(key, []).append(rate)
    conds = conditions(servers)
    report = render(figures, conds, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "enqueue.json").write_text(json.dumps({"figures": figures, "conditions": conds,
                                                  "args": vars(args)}, indent=2))
    (out / "enqueue.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


