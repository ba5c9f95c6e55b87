"""Where a consumer's CPU goes, by part, per job.

    python -m benchmarks.cpu_split                  # lease mode and RabbitMQ quorum, 50,000 jobs
    python -m benchmarks.cpu_split --targets postgres-lease --jobs 100000

For each jobq target: a fresh queue filled with no-op jobs by the real ``producer``, then
drained by the consumer the drain scenario starts (its processor, concurrency and settings,
``--once``), run in this process under cProfile. Each function's own time is
given to the part its code belongs to (the driver, asyncio, jobq's worker, its transport, its
job model, C built-ins, the rest), and each part is printed in
microseconds per job and as a share. cProfile adds a cost to every call, so the shares say
where the time goes, not how much a job costs: the drain scenario's CPU per job says that.
The profiler's clock is the wall's (a CPU-time clock is a system call, dearer than most of the
calls it would time): the drain keeps the loop busy, and the little time it waits (the last
acks) shows under the consumer's ``_close``. The consumers run on uvloop, whose own work (the
poll, the sockets) is C the profiler does not see, beside the calls it makes into Python.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import producer_argv
from benchmarks.scenarios import FULL
from benchmarks.spaces import Servers, Space
from benchmarks.targets import TARGETS, Launch, Target, Work
from jobq.cli.main import consumer_main

JOBQ = tuple(name for name, target in TARGETS.items() if target.family == "jobq")

# (what a function's file or name holds, the part it belongs to): the first that matches.
PARTS = (
    ("/psycopg", "driver: psycopg, psycopg_pool"),
    ("/aio_pika/", "driver: aio-pika, aiormq, pamqp"),
    ("/aiormq/", "driver: aio-pika, aiormq, pamqp"),
    ("/pamqp/", "driver: aio-pika, aiormq, pamqp"),
    ("/jobq/worker/", "jobq: worker (pool, executor, settle)"),
    ("/jobq/transports/", "jobq: transport"),
    ("/jobq/core/", "jobq: core (job, codec, attempts)"),
    ("/jobq/", "jobq: other"),
    ("/asyncio/", "asyncio (loop, tasks, futures, queues)"),
    ("_asyncio", "asyncio (loop, tasks, futures, queues)"),
    ("<built-in", "C: other built-ins"),
    ("<method", "C: other built-ins"),
)
OTHER = "other Python (stdlib, uuid, json, logging)"


def part_of(filename: str, name: str) -> str:
    """The part a profiled function belongs to."""
    where = f"{filename}:{name}"
    return next((part for needle, part in PARTS if needle in where), OTHER)


def fill(space: Space, jobs: int) -> None:
    """``jobs`` no-op jobs in the space's queue, by the real producer."""
    subprocess.run(producer_argv(space, jobs), env=space.env, check=True, timeout=600)


def profile(target: Target, space: Space, record_dir: Path) -> tuple[pstats.Stats, float]:
    """Drain the queue with the target's consumer here, under cProfile; its stats and the CPU
    seconds the process spent meanwhile."""
    concurrency = min(FULL.concurrency, target.max_concurrency or FULL.concurrency)
    argv = target.consumer(target, space, Launch(record_dir=record_dir, work=Work(),
                                                 concurrency=concurrency, once=True))
    saved = dict(os.environ)
    os.environ.update(space.env)
    profiler = cProfile.Profile()  # wall time: a CPU-time clock costs more than most calls
    started = time.process_time()
    try:
        profiler.enable()
        code = consumer_main([*argv[1:], "--log-level", "warning"])
        profiler.disable()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if code != 0:
        raise SystemExit(f"the consumer exited {code}")
    return pstats.Stats(profiler), time.process_time() - started


Split = dict[str, dict[str, float]]  # part -> function -> own seconds


def split(stats: pstats.Stats) -> Split:
    """Own time (tottime) by part and function, in seconds."""
    parts: Split = defaultdict(lambda: defaultdict(float))
    for (filename, line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        where = name if filename == "~" else f"{short(filename)}:{line}({name})"
        parts[part_of(filename, name)][where] += row[2]
    return parts


def short(filename: str) -> str:
    """A path from its package on (``jobq/worker/pool.py``, ``asyncio/events.py``)."""
    for marker in ("/site-packages/", "/src/", "/python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def report(target: str, jobs: int, parts: Split, cpu: float, top: int) -> str:
    """The parts, heaviest first, each with its ``top`` heaviest functions."""
    sums = {part: sum(functions.values()) for part, functions in parts.items()}
    total = sum(sums.values())
    lines = [f"{target}: {jobs:,} jobs, {cpu / jobs * 1e6:.1f} us of CPU per job under the "
             f"profiler ({total / jobs * 1e6:.1f} us in profiled functions)",
             f"  {'part':<44} {'us/job':>8} {'share':>7}"]
    for part, seconds in sorted(sums.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {part:<44} {seconds / jobs * 1e6:>8.1f} {seconds / total:>7.1%}")
        heaviest = sorted(parts[part].items(), key=lambda kv: -kv[1])[:top]
        lines += [f"      {where[:70]:<70} {own / jobs * 1e6:>6.1f}" for where, own in heaviest]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_split", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="postgres-lease,rabbitmq-quorum",
                        help=f"comma-separated, of: {', '.join(JOBQ)}")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per target")
    parser.add_argument("--top", type=int, default=3,
                        help="the heaviest functions shown under each part (us per job)")
    args = parser.parse_args(argv)
    for target in args.targets.split(","):
        if target not in JOBQ:
            parser.error(f"--targets: no jobq target {target!r} (one of {', '.join(JOBQ)})")
        space = TARGETS[target].make_space(Servers.from_env())
        space.create()
        try:
            fill(space, args.jobs)
            with tempfile.TemporaryDirectory(prefix="jobq-cpu-split-") as record_dir:
                stats, cpu = profile(TARGETS[target], space, Path(record_dir))
        finally:
            space.drop()
        print(report(target, args.jobs, split(stats), cpu, args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
