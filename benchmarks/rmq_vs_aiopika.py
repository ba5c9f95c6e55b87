"""jobq's RabbitMQ consumer against a bare aio-pika consumer, side by side in one run.

For each repeat: two fresh queues get COUNT no-op jobs each from the real ``producer``; one is
drained by ``consumer --transport=rabbitmq --once`` (one process), the other by
``benchmarks.baseline_aiopika`` (prefetch 100, a manual ack per message). The order alternates
between repeats. Rates are messages over the time from the first message to the last settle,
as each side reports it; the jobq process's wall time (start-up and the drain check included)
is shown beside it, and so is the CPU time each consumer process used (start-up included),
which the machine's other load disturbs far less than the rates.

    python -m benchmarks.rmq_vs_aiopika [--count 20000] [--repeats 3] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aio_pika

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("JOBQ_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def run(argv: list[str], env: dict[str, str]) -> tuple[str, float]:
    """Run a command to completion; return its output and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, cpu


async def drop(queue: str) -> None:
    """Delete the queues and exchange jobq declared for ``queue``."""
    connection = await aio_pika.connect(URL)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.dead", *(f"{queue}.retry.{d}" for d in (1, 5, 30, 300))):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")


def one_round(args: argparse.Namespace, jobq_first: bool) -> dict[str, float]:
    """Fill two queues, drain one with each consumer; return both rates."""
    env = {**os.environ, "JOBQ_AMQP_URL": URL, "JOBQ_CONSUMER__BUFFER": str(args.buffer)}
    tag = uuid.uuid4().hex[:8]
    queues = {"jobq": f"bench-jobq-{tag}", "bare": f"bench-bare-{tag}"}
    common = ["--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--log-level", "warning"]
    out: dict[str, float] = {}
    try:
        for queue in queues.values():
            run([str(BIN / "producer"), *common, "--queue", queue, "--count", str(args.count)], env)
        time.sleep(1.0)  # let the broker settle the writes before either side drains
        for side in (("jobq", "bare") if jobq_first else ("bare", "jobq")):
            if side == "bare":
                line, out["bare_cpu"] = run(
                    [sys.executable, "-m", "benchmarks.baseline_aiopika", URL, queues["bare"],
                     str(args.count)], {**env, "PYTHONPATH": str(ROOT)})
                out["bare"] = json.loads(line)["jobs_per_second"]
                continue
            with tempfile.NamedTemporaryFile(suffix=".json") as stats:
                started = time.perf_counter()
                _, out["jobq_cpu"] = run(
                    [str(BIN / "consumer"), *common, "--queue", queues["jobq"], "--once",
                     "--concurrency", str(args.concurrency), "--stats-json", stats.name], env)
                out["jobq_wall"] = args.count / (time.perf_counter() - started)
                result = json.loads(Path(stats.name).read_text())
            if result["ok"] != args.count:
                sys.exit(f"jobq consumer settled {result['ok']} of {args.count}")
            out["jobq"] = result["jobs_per_second"]
    finally:
        for queue in queues.values():
            asyncio.run(drop(queue))
    out["ratio"] = out["jobq"] / out["bare"]
    return out


def main() -> None:
    """Run the rounds and print a table and the median ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--buffer", type=int, default=-1, help="consumer.buffer (-1: =concurrency)")
    parser.add_argument("--json", help="also write the rounds to this file")
    args = parser.parse_args()
    print(f"{args.count:,} no-op messages per side, quorum queues, jobq concurrency "
          f"{args.concurrency} (buffer {args.buffer}); bare aio-pika prefetch 100\n")
    print("| round | jobq msg/s | jobq msg/s (wall) | bare aio-pika msg/s | ratio "
          "| jobq CPU s | bare CPU s |")
    print("|---|---|---|---|---|---|---|")
    rounds = []
    for i in range(args.repeats):
        r = one_round(args, jobq_first=i % 2 == 0)
        rounds.append(r)
        print(f"| {i + 1} | {r['jobq']:,.0f} | {r['jobq_wall']:,.0f} | {r['bare']:,.0f} | "
              f"{r['ratio']:.2f} | {r['jobq_cpu']:.2f} | {r['bare_cpu']:.2f} |", flush=True)
    print(f"\nmedian ratio jobq / bare aio-pika: {statistics.median(r['ratio'] for r in rounds):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=2))


if __name__ == "__main__":
    main()
