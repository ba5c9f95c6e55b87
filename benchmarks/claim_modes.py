"""Lease mode, transaction mode and the hand-written one-at-a-time loop, side by side.

Each round enqueues ``--count`` jobs (no-ops, or ``--sleep-ms`` each) in a fresh table and
drains them with one process per mode (the real ``consumer --once``, or
``benchmarks.raw_txn``), all at ``--concurrency``, in a rotating order so that no mode always
runs first. Rates are each process's own, from its first claim to its last settle; the table
gives the median, min and max over the rounds.

    python -m benchmarks.claim_modes --count 5000 --concurrency 16 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from jobq.config import load_settings

BIN = Path(sys.executable).parent
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "postgres.yaml"
MODES = ("lease", "transaction", "raw")


def run(argv: list[str], env: dict[str, str]) -> str:
    """Run one command; stop the benchmark with its output if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def drain(mode: str, args: argparse.Namespace, dsn: str) -> float:
    """Enqueue the jobs in a fresh schema, drain them in ``mode``; return the drain's jobs/s.

    A fresh table each time: a queue sharing its table with other queues' jobs would favour
    whichever claim query copes better with them, which is not what this compares.
    """
    schema = f"bench_modes_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "JOBQ_POSTGRES__SCHEMA": schema}
    try:
        return _drain(mode, args, env, dsn)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _drain(mode: str, args: argparse.Namespace, env: dict[str, str], dsn: str) -> float:
    queue = "bench"
    common = ["--config", str(CONFIG), "--queue", queue, "--log-level", "warning"]
    run([str(BIN / "jobq"), "init", *common], env)
    run([str(BIN / "producer"), *common, "--count", str(args.count)], env)
    if mode == "raw":
        out = run([sys.executable, "-m", "benchmarks.raw_txn", "--dsn", dsn, "--schema",
                   env["JOBQ_POSTGRES__SCHEMA"], "--queue", queue, "--workers", str(args.concurrency),
                   "--sleep-ms", str(args.sleep_ms)], env)
        stats = json.loads(out)
    else:
        with tempfile.NamedTemporaryFile(suffix=".json") as out_file:
            processor = ["-p", "sleep", "-a", f"ms={args.sleep_ms}"] if args.sleep_ms else ["-p", "noop"]
            run([str(BIN / "consumer"), *common, "--claim", mode, "--once", *processor,
                 "-n", str(args.concurrency), "--stats-json", out_file.name], env)
            stats = json.loads(Path(out_file.name).read_text())
    if stats["ok"] != args.count:
        sys.exit(f"{mode}: drained {stats['ok']} of {args.count} jobs")
    return float(stats["jobs_per_second"])


def main() -> None:
    """Print the table (and write the raw figures with ``--out``)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sleep-ms", type=float, default=0.0, help="job time (0: no-op jobs)")
    p.add_argument("--out", help="write the per-round figures here as JSON")
    args = p.parse_args()
    dsn = load_settings(CONFIG).postgres.dsn
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_no in range(args.repeat):
        order = MODES[round_no % 3:] + MODES[:round_no % 3]
        for mode in order:
            rates[mode].append(drain(mode, args, dsn))
        print(f"round {round_no + 1}: " + ", ".join(f"{m} {rates[m][-1]:,.0f}/s" for m in MODES),
              file=sys.stderr)
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    work = f"{args.sleep_ms:g} ms jobs" if args.sleep_ms else "no-op jobs"
    print(f"{args.count:,} {work}, concurrency {args.concurrency}, one process per mode, "
          f"{args.repeat} rounds\n")
    print("| mode | median jobs/s | min | max |\n| --- | ---: | ---: | ---: |")
    for mode in MODES:
        print(f"| {mode} | {median[mode]:,.0f} | {min(rates[mode]):,.0f} | {max(rates[mode]):,.0f} |")
    print(f"\ntransaction / lease: {median['transaction'] / median['lease']:.2f}; "
          f"transaction / raw loop: {median['transaction'] / median['raw']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "rates": rates}, indent=2))


if __name__ == "__main__":
    main()
