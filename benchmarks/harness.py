"""Runs one case: a clean space, the real producer and consumers as processes, the evidence read back.

The consumers are separate processes started from their console scripts (or the baselines'
modules), reaped with ``wait4`` so their CPU is known exactly; a sampler thread follows the
server's processes. The verdict comes from the completion records, never from a transport's
own counters.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cpu import Sampler
from benchmarks.measure import (
    Outcomes,
    cdf,
    count_entries,
    latency_summary,
    outcomes,
    stages,
    summarise,
    timeline,
)
from benchmarks.processors import read_records
from benchmarks.spaces import BIN, PostgresSpace, Servers, Space
from benchmarks.targets import Launch, Target, Work

READY_MARK = "consuming queue"  # what a consumer logs once it is connected and receiving
ONCE_GRACE = 10.0  # seconds a --once consumer may keep running after every job is done


@dataclass(frozen=True, kw_only=True)
class Case:
    """One measurement: a workload, a number of consumer processes, how it ends."""

    scenario: str
    variant: str
    jobs: int
    consumers: int = 1
    concurrency: int = 32
    work: Work = field(default_factory=Work)
    once: bool = True  # consumers stop by themselves when nothing is left (``--once``)
    rate: float = 0.0  # > 0: an open-loop producer runs alongside, stamping send times
    warmup: float = 0.0  # seconds of sends left out of the latency figures
    kill_at: float = 0.0  # > 0: SIGKILL one consumer once this fraction of jobs is done
    env: dict[str, str] = field(default_factory=dict)  # extra JOBQ_* settings for the case
    timeout: float = 120.0
    storage: bool = False  # note what the server holds before and after, and the rate over time


class Proc:
    """A child process whose exit status and CPU (rusage) are collected with wait4."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self._popen = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL)
        self.pid = self._popen.pid
        self.code: int | None = None
        self.cpu = 0.0

    def poll(self) -> int | None:
        """The exit code once the process has ended (reaping it), else None."""
        if self.code is None:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
                self.cpu = usage.ru_utime + usage.ru_stime
                self._popen.returncode = self.code  # so Popen does not wait for it again
        return self.code

    def signal(self, sig: int) -> None:
        """Send ``sig`` if still running."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the exit; SIGKILL after that."""
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.poll() is None:
            self.signal(signal.SIGKILL)
            while self.poll() is None:
                time.sleep(0.01)
        return self.code

    def ready(self) -> bool:
        """Whether the process has logged that it is consuming."""
        try:
            return READY_MARK in self.log.read_text(errors="replace")
        except OSError:
            return False

    def tail(self, lines: int = 5) -> str:
        """The last lines of its output (for problem reports)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def producer_argv(space: Space, count: int, rate: float = 0.0) -> list[str]:
    """The real ``producer`` console script."""
    argv = [str(BIN / "producer"), "--config", str(space.config), "--queue", space.queue,
            "--count", str(count), "--kind", "bench", "--log-level", "warning"]
    return argv + (["--rate", str(rate), "--stamp"] if rate else [])


def target_producer(target: Target, space: Space, count: int, rate: float = 0.0) -> list[str]:
    """The target's producer: its own (a peer's) or jobq's ``producer`` command."""
    if target.producer is not None:
        return target.producer(target, space, count, rate)
    return producer_argv(space, count, rate)


def enqueue(target: Target, space: Space, count: int, log: Path) -> None:
    """Pre-enqueue ``count`` jobs with the target's producer; raise if it fails."""
    proc = Proc(target_producer(target, space, count), space.env, log)
    if proc.wait(max(300.0, count / 2_000)) != 0:
        raise RuntimeError(f"producer failed ({proc.code}): {proc.tail()}")


class CaseRun:
    """The moving parts of one case while it runs."""

    def __init__(self, target: Target, case: Case, space: Space, work_dir: Path) -> None:
        self.target, self.case, self.space, self.dir = target, case, space, work_dir
        self.records = work_dir / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        self.sampler = Sampler(space.server_pids, find_waits=space.server_waits)
        self.consumers: list[Proc] = []
        self.producer: Proc | None = None
        self.killed: int | None = None
        # Pre-enqueued work waits behind a start gate until every consumer is up, so k
        # consumers drain together instead of the first starter racing the others' start-up.
        self.gate = None if case.rate else work_dir / "go"
        self.problems: list[str] = []

    def start_consumers(self) -> None:
        """Start every consumer process of the case."""
        for i in range(self.case.consumers):
            launch = Launch(record_dir=self.records, work=self.case.work,
                            concurrency=self.case.concurrency, once=self.case.once,
                            stats_json=self.dir / f"stats-{i}.json"
                            if self.target.family == "jobq" else None, gate=self.gate)
            proc = Proc(self.target.consumer(self.target, self.space, launch), self.space.env,
                        self.dir / f"consumer-{i}.log")
            self.consumers.append(proc)
            self.sampler.watch(proc.pid)

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until every consumer says it is consuming (so latency excludes start-up)."""
        deadline = time.monotonic() + timeout
        while not all(p.ready() or p.poll() is not None for p in self.consumers):
            if time.monotonic() > deadline:
                self.problems.append("a consumer did not report ready in time")
                return
            time.sleep(0.02)

    def supervise(self) -> None:
        """Run until the consumers are done (or stopped once every job has an outcome)."""
        case, deadline = self.case, time.monotonic() + self.case.timeout
        stop_when_done = not case.once or case.kill_at > 0
        complete_since: float | None = None
        while any(p.poll() is None for p in self.consumers):
            if time.monotonic() > deadline:
                self.problems.append(f"timed out after {case.timeout:.0f}s")
                break
            recorded = count_entries(self.records)
            if case.kill_at and self.killed is None and recorded >= case.kill_at * case.jobs:
                victim = self.consumers[0]
                victim.signal(signal.SIGKILL)
                self.killed = victim.pid
            producing = self.producer is not None and self.producer.poll() is None
            if complete_since is None and not producing and recorded >= case.jobs \
                    and outcomes(self.records, case.jobs).complete():
                complete_since = time.monotonic()
            # --once consumers get a grace period to notice the empty queue and exit by themselves.
            if complete_since is not None and (
                    stop_when_done or time.monotonic() - complete_since > ONCE_GRACE):
                break
            time.sleep(0.02)
        for proc in self.consumers:
            proc.signal(signal.SIGTERM)
        for proc in self.consumers:
            proc.wait(30)
        if self.producer is not None and self.producer.wait(5) != 0:
            self.problems.append(f"producer exited {self.producer.code}: {self.producer.tail()}")

    def check_exits(self) -> None:
        """Every consumer but the one killed on purpose must exit 0.

        One stopped before it finished starting (tiny runs end that fast) dies of the
        SIGTERM's default action: that is not a consumer failure.
        """
        for proc in self.consumers:
            if proc.code == -signal.SIGTERM and not proc.ready():
                continue
            if proc.pid != self.killed and proc.code != 0:
                self.problems.append(f"consumer {proc.pid} exited {proc.code}: {proc.tail()}")

    def reported(self) -> list[dict[str, Any]]:
        """What the consumers themselves reported (``--stats-json``), for reference only."""
        out = []
        for file in sorted(self.dir.glob("stats-*.json")):
            try:
                out.append(json.loads(file.read_text()))
            except (OSError, ValueError):
                continue
        return out


def run_case(target: Target, case: Case, servers: Servers, work_dir: Path) -> dict[str, Any]:
    """Run ``case`` against ``target`` in a fresh space; return the run's result."""
    work_dir.mkdir(parents=True, exist_ok=True)
    space = target.make_space(servers, case.env)
    started = time.monotonic()
    run = CaseRun(target, case, space, work_dir)
    storage: dict[str, Any] = {}
    settled: dict[int, float] = {}  # PostgreSQL jobq targets' finished_at, by job (stages)
    try:
        space.create()
        if not case.rate:
            enqueue(target, space, case.jobs, work_dir / "producer.log")
        if case.storage:
            storage["before"] = space.storage()
        run.sampler.start()
        run.start_consumers()
        run.wait_ready()
        if run.gate is not None:
            run.gate.touch()
        else:
            run.producer = Proc(target_producer(target, space, case.jobs, case.rate),
                                space.env, work_dir / "producer.log")
        run.supervise()
    finally:
        run.sampler.stop()
        for proc in run.consumers:
            proc.wait(10)
        try:
            if case.storage and "before" in storage:
                storage["after"] = space.storage()
            if case.scenario == "latency" and target.family == "jobq" and isinstance(
                    space, PostgresSpace):
                settled = space.settled()
        finally:  # a million jobs must not stay on the shared servers
            space.drop()
    run.check_exits()
    run.problems.extend(run.sampler.errors)
    entries = list(read_records(run.records))  # read once: a backlog case holds 1,000,000
    result = evaluate(run, summarise(entries, case.jobs, case.warmup))
    if case.scenario == "latency":
        result["stages_ms"] = stages(entries, case.warmup, settled)
    if case.storage:
        result["storage"] = storage
        result["timeline"] = timeline([e.finished for e in entries], case.jobs)
    result["wall_s"] = round(time.monotonic() - started, 3)
    result["settings"] = target.describe_settings(space, case.concurrency)
    return result


def evaluate(run: CaseRun, out: Outcomes) -> dict[str, Any]:
    """The run's figures and verdict."""
    case, sampler = run.case, run.sampler
    problems = list(run.problems)
    if out.lost:
        problems.append(f"{out.lost} jobs lost")
    if out.unexpected:
        problems.append(f"{out.unexpected} recorded jobs were never enqueued")
    span = out.span
    notes = []  # worth knowing, not a failure
    if case.rate and span and out.entries / span < 0.9 * case.rate:
        notes.append(f"completed {out.entries / span:,.0f} jobs/s of the {case.rate:,.0f} offered: "
                     "the producer or the consumer could not keep up, latency includes the backlog")
    if out.duplicates and not case.kill_at:
        notes.append(f"{out.duplicates} duplicate completions without a crash")
    # CPU inside the completion window only (start-up and idle tails left out), from the
    # samples taken just before the first and the last completion.
    consumers_cpu, server_cpu, host_cpu = (
        series.at(out.last) - series.at(out.first)
        for series in (sampler.consumers, sampler.server, sampler.host))
    per_1k = 1000.0 / max(out.entries, 1)
    return {
        "target": run.target.name, "scenario": case.scenario, "variant": case.variant,
        "consumers": case.consumers, "concurrency": case.concurrency, "jobs": case.jobs,
        "rate_offered": case.rate or None, "status": "failed" if problems else "ok",
        "problems": problems, "notes": notes, "throughput": round(out.throughput(), 1),
        "span_s": round(span, 3), "done": out.done, "dead": out.dead, "lost": out.lost,
        "duplicates": out.duplicates, "unexpected": out.unexpected,
        "latency_ms": latency_summary(out.latencies_ms), "cdf_ms": cdf(out.latencies_ms),
        "warmup_s": case.warmup, "warmup_max_ms": round(out.warmup_max_ms, 3),
        "killed_pid": run.killed,
        "cpu": {
            "consumers_s": round(consumers_cpu, 3), "server_s": round(server_cpu, 3),
            "host_s": round(host_cpu, 3),
            "consumers_process_s": round(sum(p.cpu for p in run.consumers), 3),  # start-up too
            "consumers_per_1k": round(consumers_cpu * per_1k, 4),
            "server_per_1k": round(server_cpu * per_1k, 4),
            "consumer_cores": round(consumers_cpu / span, 2) if span else None,
            "server_cores": round(server_cpu / span, 2) if span else None,
            "host_cores": round(host_cpu / span, 2) if span else None,
            # Server processes by what they were doing, on average over the window (Postgres).
            "server_waits": sampler.waits.mean(out.first, out.last),
        },
        "exit_codes": [p.code for p in run.consumers],
        "reported": run.reported(),
    }
