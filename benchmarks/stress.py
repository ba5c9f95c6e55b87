"""``python -m benchmarks.stress``: PostgreSQL stress phases under a steady open-loop load.

The phases independent queue harnesses run against PostgreSQL queues, each during one steady
run, on a PostgreSQL server of the harness's own (``initdb`` on ``--port``, 127.0.0.1:5451 by
default, ``max_connections`` 400, autovacuum on as a new cluster has it; deleted afterwards;
the machine's own server is not touched):

- ``clean``: the offered load (``--rate``, jobs/s), nothing else;
- ``pinned``: an idle-in-transaction writer (``REPEATABLE READ``, a ``txid_current()``) holds
  the xmin horizon for the phase: vacuum can remove no dead row;
- ``readers``: four ``REPEATABLE READ`` readers scan the jobs table in a loop;
- ``overload``: the load at 1.5x what the consumers sustain (``--concurrency`` /
  ``--work-ms``), then back to the offered load;
- ``idle``: 300 idle connections held against the database.

Each phase is followed by ``--recover`` seconds of the plain load. One jobq consumer (lease
mode, the benchmark's ``sleep`` processor: ``--work-ms`` per job at ``--concurrency``, so it
sustains concurrency / work jobs/s) drains while the harness's own producer enqueues at the
phase's rate, stamping each job's send time. Per phase: the completions per second during it,
p50/p99 latency of the jobs sent in it, the jobs table's dead tuples at its end, and how long
after its end the latency of newly sent jobs came back under twice the clean phase's p99
(``caught up``). The goal: throughput during the pinned horizon at least 0.7x the clean
phase's, and every phase caught up within a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.measure import latency_summary
from benchmarks.processors import read_records
from benchmarks.spaces import BIN, ROOT
from faults.cluster.standby import PostgresPair
from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob

PHASES = ("clean", "pinned", "readers", "overload", "idle")
READERS = 4
IDLE_CONNECTIONS = 300
TICK = 0.01  # the producer sends what is due every 10 ms
WARMUP_S = 3.0
READY = "consuming queue"


@dataclass
class Phase:
    """One phase: its name, when it ran, and at what rate jobs were offered."""

    name: str
    start: float
    end: float
    rate: float
    dead_tuples: int = 0


@dataclass
class Producer:
    """Enqueues at ``rate`` (changed between phases), numbering and stamping every job."""

    settings: Any
    rate: float
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # the report says so: the run goes on without its load
            self.errors.append(f"{type(exc).__name__}: {exc}")

    async def _run(self) -> None:
        async with connect_publisher(self.settings) as publisher:
            owed, last = 0.0, time.monotonic()
            while not self.stop.is_set():
                await asyncio.sleep(TICK)
                now = time.monotonic()
                owed += (now - last) * self.rate
                last = now
                count = int(owed)
                if not count:
                    continue
                owed -= count
                stamp = time.time()
                await publisher.enqueue_many([
                    NewJob(kind="stress", payload={"n": self.sent + i, "sent_at": stamp})
                    for i in range(count)])
                self.sent += count


@contextlib.contextmanager
def disturbance(name: str, dsn: str, table: sql.Composed) -> Iterator[None]:
    """What phase ``name`` does to the server while it lasts."""
    if name == "pinned":
        with psycopg.connect(dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("SELECT txid_current()")  # a writer: its xid pins the horizon
            yield
            conn.rollback()
    elif name == "readers":
        stop = threading.Event()

        def scan() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    with conn.transaction():
                        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        conn.execute(sql.SQL("SELECT count(*), max(id) FROM {}").format(table))

        threads = [threading.Thread(target=scan, daemon=True) for _ in range(READERS)]
        for t in threads:
            t.start()
        yield
        stop.set()
        for t in threads:
            t.join(30)
    elif name == "idle":
        held = [psycopg.connect(dsn, autocommit=True) for _ in range(IDLE_CONNECTIONS)]
        yield
        for conn in held:
            conn.close()
    else:
        yield


def dead_tuples(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s "
                           "AND relname = 'jobs'", (schema,)).fetchone()
    return int(row[0]) if row else 0


def figures(phases: list[Phase], records: Path, recover: float) -> list[dict[str, Any]]:
    """Per phase: completions/s during it, latency of the jobs sent in it, catch-up time."""
    entries = list(read_records(records))
    finished = sorted(e.finished for e in entries)
    clean = next(p for p in phases if p.name == "clean")
    clean_ms = sorted((e.finished - e.sent_at) * 1000 for e in entries
                      if clean.start <= e.sent_at < clean.end)
    clean_p99 = latency_summary(clean_ms).get("p99", 0.0)
    out = []
    for phase in phases:
        done = sum(1 for t in finished if phase.start <= t < phase.end)
        sent_ms = sorted((e.finished - e.sent_at) * 1000 for e in entries
                         if phase.start <= e.sent_at < phase.end)
        caught = caught_up(entries, phase.end, phase.end + recover, 2 * clean_p99)
        out.append({"phase": phase.name, "seconds": round(phase.end - phase.start, 1),
                    "offered_per_s": phase.rate,
                    "throughput": round(done / (phase.end - phase.start), 1),
                    "latency_ms": latency_summary(sent_ms), "dead_tuples": phase.dead_tuples,
                    "caught_up_s": caught})
    return out


def caught_up(entries: list[Any], start: float, end: float, bound_ms: float) -> float | None:
    """Seconds after ``start`` from which every 1-s bucket of jobs sent had its p99 under
    ``bound_ms`` until ``end``; None if never."""
    buckets: dict[int, list[float]] = {}
    for e in entries:
        if start <= e.sent_at < end:
            buckets.setdefault(int(e.sent_at - start), []).append((e.finished - e.sent_at) * 1000)
    good_from = None
    for second in range(int(end - start)):
        lat = sorted(buckets.get(second, []))
        ok = bool(lat) and latency_summary(lat).get("p99", 1e9) <= bound_ms
        if ok and good_from is None:
            good_from = second
        elif not ok:
            good_from = None
    return None if good_from is None else float(good_from)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The whole run on a server of its own; the phases' figures."""
    server = PostgresPair(args.port)
    dsn = server.dsn(args.port)
    schema, queue = "stress", "stress"
    try:
        server.start(standby=False, conf=f"max_connections = {IDLE_CONNECTIONS + 100}\n")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")},
               "JOBQ_PG_DSN": dsn, "JOBQ_POSTGRES__SCHEMA": schema,
               "PYTHONPATH": str(ROOT)}
        config = ROOT / "configs" / "postgres.yaml"
        subprocess.run([str(BIN / "jobq"), "init", "--config", str(config), "--queue", queue],
                       env=env, check=True, capture_output=True, timeout=60)
        records = work / "records"
        log = args.out / "consumer.log"
        consumer = subprocess.Popen(
            [str(BIN / "consumer"), "--config", str(config), "--queue", queue, "--concurrency",
             str(args.concurrency), "--processor", "benchmarks.processors:sleep", "-a",
             f"dir={records}", "-a", f"ms={args.work_ms}"],
            env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        deadline = time.monotonic() + 30
        while READY not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or consumer.poll() is not None:
                consumer.kill()
                raise RuntimeError(f"the consumer did not start (see {log})")
            time.sleep(0.05)
        settings = load_settings(config, {"postgres.dsn": dsn, "postgres.schema": schema,
                                          "queue": queue, "log.level": "warning"}, env={})
        producer = Producer(settings, args.rate)
        thread = threading.Thread(target=producer.run, daemon=True)
        thread.start()
        capacity = args.concurrency / (args.work_ms / 1000)
        table = sql.Identifier(schema, "jobs")
        phases: list[Phase] = []
        time.sleep(WARMUP_S)  # the load runs before the clean phase is counted
        try:
            for name in args.phases:
                rate = 1.5 * capacity if name == "overload" else args.rate
                producer.rate = rate
                started = time.time()
                with disturbance(name, dsn, sql.SQL("{}").format(table)):
                    time.sleep(args.seconds * (2 if name == "pinned" else 1))
                    phase = Phase(name, started, time.time(), rate)
                    phase.dead_tuples = dead_tuples(dsn, schema)
                producer.rate = args.rate
                phases.append(phase)
                print(f"stress: {name} done ({phase.end - phase.start:.0f} s at {rate:,.0f}/s, "
                      f"{phase.dead_tuples:,} dead tuples)", file=sys.stderr, flush=True)
                time.sleep(args.recover)
        finally:
            producer.stop.set()
            thread.join(30)
            time.sleep(2)
            consumer.terminate()
            try:
                consumer.wait(120)
            except subprocess.TimeoutExpired:
                consumer.kill()
                consumer.wait()
        return {"capacity_per_s": capacity, "offered_per_s": args.rate, "sent": producer.sent,
                "recorded": sum(1 for _ in read_records(records)),
                "producer_errors": producer.errors,
                "phases": figures(phases, records, args.recover)}
    finally:
        server.stop()


def report(result: dict[str, Any]) -> str:
    """The phases as a table, and the goal lines."""
    rows = result["phases"]
    clean = next(r for r in rows if r["phase"] == "clean")
    lines = [f"Offered {result['offered_per_s']:,.0f} jobs/s to a consumer that sustains "
             f"{result['capacity_per_s']:,.0f}/s; {result['sent']:,} sent, "
             f"{result['recorded']:,} completed.", "",
             "| phase | s | offered/s | done/s | x clean | p50 ms | p99 ms | dead tuples at end "
             "| caught up after (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ms = r["latency_ms"]
        lines.append(f"| {r['phase']} | {r['seconds']:.0f} | {r['offered_per_s']:,.0f} | "
                     f"{r['throughput']:,.0f} | {r['throughput'] / max(clean['throughput'], 1):.2f}x | "
                     f"{ms.get('p50', float('nan')):.1f} | {ms.get('p99', float('nan')):.1f} | "
                     f"{r['dead_tuples']:,} | "
                     f"{'never' if r['caught_up_s'] is None else round(r['caught_up_s'])} |")
    pinned = next((r for r in rows if r["phase"] == "pinned"), None)
    if pinned:
        ratio = pinned["throughput"] / max(clean["throughput"], 1)
        lines.append(f"\nPinned horizon: {ratio:.2f}x the clean phase's throughput; goal ≥ 0.7x "
                     f"— {'meets' if ratio >= 0.7 else '**misses**'}.")
    slow = [r["phase"] for r in rows if r["caught_up_s"] is None or r["caught_up_s"] > 60]
    lines.append(f"Caught up within a minute after every phase: "
                 f"{'yes' if not slow else '**no**: ' + ', '.join(slow)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print the table, write stress.json and stress.md."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.stress", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1000.0, help="offered jobs/s")
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--work-ms", type=float, default=10.0, help="each job's sleep")
    p.add_argument("--seconds", type=float, default=30.0, help="each phase (pinned: twice)")
    p.add_argument("--recover", type=float, default=30.0, help="plain load after each phase")
    p.add_argument("--phases", default=",".join(PHASES), type=lambda s: s.split(","))
    p.add_argument("--port", type=int, default=5451)
    p.add_argument("--out", type=Path,
                   default=ROOT / "benchmarks" / "results" / f"stress-{time.strftime('%Y%m%d-%H%M%S')}")
    args = p.parse_args(argv)
    if "clean" not in args.phases:
        p.error("--phases: the clean phase is the yardstick, keep it")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jobq-stress-") as tmp:
        result = run(args, Path(tmp))
    (args.out / "stress.json").write_text(json.dumps(result, indent=2))
    text = report(result)
    (args.out / "stress.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
