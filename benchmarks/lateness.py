"""``python -m benchmarks.lateness``: how late delayed jobs run, on each target.

For each target (Postgres lease and transaction, RabbitMQ quorum and classic): a fresh queue,
one real ``consumer`` process (the benchmark's recording no-op), and N jobs enqueued with
delays drawn from a fixed mix (log-uniform, 0.1 s to ``--longest``; seeded, so every target
gets the same delays); retries take the same path on both backends (tested in
tests/integration/test_delays.py). Each job carries its due time as
``sent_at``, so the completion record's ``finished - sent_at`` is its lateness against the
same wall clock. Reported: p50 / p99 / max lateness, and how many ran early (must be 0).

A job's due time is taken just before its enqueue: the measured lateness includes the enqueue
itself, so it is an upper bound.

``--same-instant`` is the ``delayed`` case instead: every job (default 100,000) due at one
instant, ``--lead`` seconds after the first enqueue (long enough to enqueue them all, in
batches of 1,000 through ``enqueue_many`` with ``run_at``), so they all become due together
and the consumer must take a whole backlog at once. Its lateness is the time from that instant
to each job's completion: p50, p99 and max per target; none may run early.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.measure import latency_summary
from benchmarks.processors import DONE, read_records
from benchmarks.spaces import BIN, PostgresSpace, RabbitSpace, Servers, Space
from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob

TARGETS = ("postgres-lease", "postgres-transaction", "rabbitmq-quorum", "rabbitmq-classic")
READY = "consuming queue"


def space(target: str, servers: Servers) -> Space:
    """A fresh queue of ``target``'s backend, claim mode or queue type."""
    if target.startswith("postgres"):
        return PostgresSpace(servers, {"JOBQ_POSTGRES__CLAIM": target.split("-")[1]})
    return RabbitSpace(servers, {"JOBQ_RABBITMQ__QUEUE_TYPE": target.split("-")[1]})


def delays(count: int, longest: float, seed: int = 7) -> list[float]:
    """``count`` delays, log-uniform from 0.1 s to ``longest``."""
    rand = random.Random(seed)
    low, high = math.log(0.1), math.log(longest)
    return [round(math.exp(rand.uniform(low, high)), 3) for _ in range(count)]


async def enqueue_at_once(target_space: Space, count: int, lead: float) -> float:
    """``count`` jobs all due ``lead`` s from now (``run_at``), in batches of 1,000; the
    instant, as ``sent_at`` of each. RuntimeError if the enqueue outlasted the lead."""
    settings = load_settings(target_space.config, {"queue": target_space.queue}, env=target_space.env)
    due = time.time() + lead
    when = datetime.fromtimestamp(due, UTC)
    async with connect_publisher(settings) as publisher:
        for start in range(0, count, 1000):
            await publisher.enqueue_many([
                NewJob(kind="timed", run_at=when, payload={"n": n, "sent_at": due})
                for n in range(start, min(count, start + 1000))])
    if time.time() > due:
        raise RuntimeError(f"enqueueing {count:,} jobs took longer than --lead {lead:g}s: "
                           f"the first were due before the last were enqueued")
    return due


async def enqueue(target_space: Space, waits: list[float]) -> None:
    """One job per wait, its due time as ``sent_at``, each enqueued on its own."""
    settings = load_settings(target_space.config, {"queue": target_space.queue}, env=target_space.env)
    async with connect_publisher(settings) as publisher:
        for n, wait in enumerate(waits):
            due = time.time() + wait
            await publisher.enqueue(NewJob(kind="timed", delay=wait,
                                           payload={"n": n, "sent_at": due}))


def run_target(target: str, servers: Servers, waits: list[float], out: Path,
               lead: float = 0.0) -> dict[str, Any]:
    """Lateness figures of one target (``lead``: every job due at one instant, see the module)."""
    where = space(target, servers)
    where.create()
    records = out / target
    log = out / f"{target}.log"
    try:
        with log.open("wb") as sink:
            consumer = subprocess.Popen(
                [str(BIN / "consumer"), "--config", str(where.config), "--queue", where.queue,
                 "--processor", "benchmarks.processors:record", "-a", f"dir={records}"],
                env=where.env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while READY not in log.read_text(errors="replace"):
                if time.monotonic() > deadline or consumer.poll() is not None:
                    raise RuntimeError(f"{target}: the consumer did not start (see {log})")
                time.sleep(0.05)
            if lead:
                asyncio.run(enqueue_at_once(where, len(waits), lead))
            else:
                asyncio.run(enqueue(where, waits))
            deadline = time.monotonic() + max(waits) + lead + 300
            while len(list(read_records(records))) < len(waits) and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            consumer.terminate()
            consumer.wait(60)
    finally:
        where.drop()
    entries = [e for e in read_records(records) if e.status == DONE]
    late_ms = sorted((e.finished - e.sent_at) * 1000 for e in entries)
    runs: dict[int, int] = {}
    for entry in entries:
        runs[entry.n] = runs.get(entry.n, 0) + 1
    return {"target": target, "jobs": len(waits), "done": len(runs),
            "duplicates": sum(n - 1 for n in runs.values()),
            "early": sum(1 for ms in late_ms if ms < 0),
            "over_bound": 0 if lead else sum(
                1 for e in entries if e.finished - e.sent_at > max(1.0, 0.02 * waits[e.n])),
            "lateness_ms": latency_summary(late_ms)}


def main(argv: list[str] | None = None) -> int:
    """Run every target in turn; print a table, write lateness.json."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lateness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, help="delayed jobs per target (default 300; "
                        "100,000 with --same-instant)")
    parser.add_argument("--same-instant", action="store_true",
                        help="the delayed case: every job due at one instant (see above)")
    parser.add_argument("--lead", type=float, default=40.0,
                        help="--same-instant: seconds from the first enqueue to the instant")
    parser.add_argument("--longest", type=float, default=40.0, help="longest delay (s)")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", default=f"benchmarks/results/lateness-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = args.jobs or (100_000 if args.same_instant else 300)
    waits = [args.lead] * jobs if args.same_instant else delays(jobs, args.longest)
    lead = args.lead if args.same_instant else 0.0
    results = [run_target(t, Servers.from_env(), waits, out, lead) for t in args.targets.split(",")]
    (out / "lateness.json").write_text(json.dumps(results, indent=2))
    print(f"{jobs:,} jobs per target, all due at one instant {lead:g} s after the first "
          f"enqueue" if lead else f"{jobs} jobs per target, delays 0.1-{args.longest:g} s "
          f"(log-uniform)")
    bound = "" if lead else " over max(1 s, 2%) |"  # a backlog's lateness has no such bound
    print(f"| target | done | early |{bound} p50 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: |" + (" ---: |" if bound else "") + " ---: | ---: | ---: |")
    for r in results:
        ms = r["lateness_ms"]
        over = f" {r['over_bound']} |" if bound else ""
        print(f"| {r['target']} | {r['done']}/{r['jobs']} | {r['early']} |{over} "
              f"{ms.get('p50', math.nan):.1f} | {ms.get('p99', math.nan):.1f} | "
              f"{ms.get('max', math.nan):.1f} |")
    bad = any(r["early"] or r["over_bound"] or r["done"] < r["jobs"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
