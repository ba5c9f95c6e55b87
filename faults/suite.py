"""`make chaos`: the fault suite. Not part of the default test run (it restarts the servers).

For each transport: enqueue N jobs (default 50,000) through the Python API, keeping the ids it
returned; start three consumers whose processor appends each finished job id to a file of its
own (tests.processors:record, the independent completion record); then, until every job has
ended, ``kill -9`` a random consumer every few seconds and start a new one, restart the server
once (at 30 % progress), and for Postgres cut the consumers' backends with pg_terminate_backend
every few seconds. The first consumer is never killed (the witness: it lives through every
fault). At the end the consumers that were never killed must still be alive and exit 0 on
SIGTERM, and, from the record and the backend's final state: lost (accepted, neither
recorded nor dead, or done without a record) must be 0, every job must be done or dead, and
duplicates are counted. One summary line per transport; a JSON and a Markdown report.

    python -m faults                      # everything, 50,000 jobs per transport
    python -m faults --jobs 5000 --transports postgres-lease --no-restart
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from faults.backend import Backend, Options
from faults.postgres import PostgresBackend
from faults.rabbitmq import RabbitBackend
from tests.processors import completions

RESULTS = Path(__file__).resolve().parent / "results"
AVAILABLE = ("postgres-lease", "postgres-transaction", "rabbitmq-quorum", "rabbitmq-classic")


@dataclass
class Consumer:
    """One consumer process and where its stderr goes."""

    proc: subprocess.Popen[bytes]
    log: Path
    killed: bool = False
    witness: bool = False  # never killed: it must live through every fault and stop cleanly


@dataclass
class Summary:
    """What one transport's run did and found."""

    transport: str
    jobs: int = 0
    kills: int = 0
    restarts: int = 0
    terminated_backends: int = 0
    lost: int = 0
    duplicates: int = 0
    dead: int = 0
    unfinished: int = 0
    wall_s: float = 0.0
    survivors: int = 0
    survivors_exit_0: int = 0
    dead_reasons: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, everything ended, every survivor alive and clean."""
        return (not self.problems and self.lost == 0 and self.unfinished == 0
                and self.survivors == self.survivors_exit_0)

    def line(self) -> str:
        """The one summary line printed per transport."""
        return (f"chaos {self.transport}: jobs={self.jobs} kills={self.kills} "
                f"restarts={self.restarts} terminated_backends={self.terminated_backends} "
                f"lost={self.lost} duplicates={self.duplicates} dead={self.dead} "
                f"unfinished={self.unfinished} survivors_exit_0={self.survivors_exit_0}/"
                f"{self.survivors} wall={self.wall_s:.1f}s {'OK' if self.ok else 'FAILED'}")


class Run:
    """One transport under faults."""

    def __init__(self, backend: Backend, options: Options, workdir: Path, logs_to: Path) -> None:
        self.backend = backend
        self.logs_to = logs_to  # where the consumers' stderr is kept when the run fails
        self.options = options
        self.workdir = workdir
        self.record = workdir / "record"
        self.consumers: list[Consumer] = []
        self.summary = Summary(transport=backend.name, jobs=options.jobs)
        self.rand = random.Random()

    def start_consumer(self) -> Consumer:
        """Start one more consumer, its stderr in a file of its own."""
        argv, env = self.backend.consumer_command(self.record, self.options)
        log = self.workdir / f"consumer-{len(self.consumers)}.err"
        with log.open("wb") as err:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        consumer = Consumer(proc, log)
        self.consumers.append(consumer)
        return consumer

    def live(self) -> list[Consumer]:
        """Consumers started and not killed by us."""
        return [c for c in self.consumers if not c.killed]

    def kill_one(self) -> None:
        """kill -9 a random live consumer (never the witness) and start a new one."""
        victim = self.rand.choice([c for c in self.live() if not c.witness])
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        victim.killed = True
        self.summary.kills += 1
        self.start_consumer()

    def check_exits(self) -> None:
        """A consumer that exits on its own is a failure: note it, replace it."""
        for consumer in self.live():
            code = consumer.proc.poll()
            if code is not None:
                consumer.killed = True  # out of the survivors; it did not survive
                tail = consumer.log.read_text(errors="replace").strip().splitlines()[-3:]
                self.summary.problems.append(f"consumer exited by itself with {code}: {tail}")
                self.start_consumer()

    def shake(self) -> None:
        """Faults until every job has ended (or the timeout: a hang)."""
        opts, now = self.options, time.monotonic()
        deadline = now + opts.timeout
        next_kill = now + opts.kill_every
        next_cut = now + opts.terminate_every
        while True:
            time.sleep(0.25)
            self.check_exits()
            remaining = self.backend.remaining()
            now = time.monotonic()
            if remaining == 0:
                return
            if now > deadline:
                self.summary.problems.append(f"hang: {remaining} jobs unfinished after {opts.timeout}s")
                return
            if (opts.restart and not self.summary.restarts and remaining is not None
                    and remaining <= 0.7 * opts.jobs):
                self.backend.restart_server()
                self.summary.restarts += 1
            if opts.kill_every > 0 and now >= next_kill:
                self.kill_one()
                next_kill = now + self.rand.uniform(0.5, 1.5) * opts.kill_every
            if opts.terminate_every > 0 and now >= next_cut:
                self.summary.terminated_backends += self.backend.disrupt()
                next_cut = now + self.rand.uniform(0.5, 1.5) * opts.terminate_every

    def stop_survivors(self) -> None:
        """SIGTERM every consumer we did not kill; each must be alive and exit 0."""
        survivors = self.live()
        self.summary.survivors = len(survivors)
        for consumer in survivors:
            if consumer.proc.poll() is None:
                consumer.proc.send_signal(signal.SIGTERM)
        for consumer in survivors:
            try:
                code = consumer.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                consumer.proc.kill()
                code = consumer.proc.wait()
                self.summary.problems.append(f"a consumer did not stop within 60s of SIGTERM "
                                             f"({consumer.log.name})")
            if code == 0:
                self.summary.survivors_exit_0 += 1
            else:
                tail = consumer.log.read_text(errors="replace").strip().splitlines()[-3:]
                self.summary.problems.append(f"survivor exited {code}: {tail}")

    def check(self, accepted: list[str]) -> None:
        """Compare the accepted ids with the completion record and the backend's final state."""
        state = self.backend.final_state()
        recorded = collections.Counter(completions(self.record))
        accepted_set = set(accepted)
        ended = set(recorded) | set(state.dead)
        lost = accepted_set - ended
        done_unrecorded = state.done - set(recorded)  # acked but never completed: lost work
        s = self.summary
        s.lost = len(lost | (done_unrecorded & accepted_set))
        s.duplicates = sum(n - 1 for n in recorded.values())
        s.dead = len(state.dead)
        s.unfinished = state.unfinished
        s.dead_reasons = dict(collections.Counter(state.dead.values()).most_common(10))
        if lost:
            s.problems.append(f"lost ids (first 10): {sorted(lost, key=int)[:10]}")
        if done_unrecorded:
            s.problems.append(f"done without a completion: {sorted(done_unrecorded)[:10]}")
        strangers = set(recorded) - accepted_set
        if strangers:
            s.problems.append(f"recorded ids never enqueued: {sorted(strangers)[:10]}")

    def execute(self) -> Summary:
        """Set up, shake, stop, check; always bring the server back and clean up."""
        started = time.monotonic()
        try:
            self.backend.setup()
            accepted = asyncio.run(self.backend.enqueue(self.options.jobs))
            self.summary.jobs = len(accepted)
            for _ in range(self.options.consumers):
                self.start_consumer()
            self.consumers[0].witness = True
            self.shake()
            self.stop_survivors()
            self.summary.wall_s = time.monotonic() - started
            self.check(accepted)
            if not self.summary.ok:
                self.logs_to.mkdir(parents=True, exist_ok=True)
                for log in self.workdir.glob("*.err"):
                    shutil.copy(log, self.logs_to / log.name)
                self.summary.problems.append(f"consumer logs kept in {self.logs_to}")
        finally:
            for consumer in self.consumers:
                if consumer.proc.poll() is None:
                    consumer.proc.kill()
                    consumer.proc.wait()
            self.backend.ensure_up()
            if not self.options.keep:
                self.backend.cleanup()
        return self.summary


def make_backend(name: str) -> Backend:
    """The backend called ``name`` (postgres-lease, postgres-transaction, ...)."""
    if name in ("postgres-lease", "postgres-transaction"):
        return PostgresBackend(name.removeprefix("postgres-"))
    if name in ("rabbitmq-quorum", "rabbitmq-classic"):
        return RabbitBackend(name.removeprefix("rabbitmq-"))
    raise SystemExit(f"chaos: unknown transport {name!r}")


def write_report(summaries: list[Summary], options: Options, out: Path) -> None:
    """``out``.json (everything) and ``out``.md (the table and the dead reasons)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"options": asdict(options), "runs": [asdict(s) | {"ok": s.ok} for s in summaries]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2))
    head = ("| transport | jobs | kills | restarts | backends cut | lost | duplicates | dead | "
            "unfinished | survivors exit 0 | wall s | result |")
    lines = ["# jobq fault suite", "", f"options: `{json.dumps(asdict(options))}`", "", head,
             "|" + "---|" * 12]
    for s in summaries:
        lines.append(f"| {s.transport} | {s.jobs} | {s.kills} | {s.restarts} | "
                     f"{s.terminated_backends} | {s.lost} | {s.duplicates} | {s.dead} | "
                     f"{s.unfinished} | {s.survivors_exit_0}/{s.survivors} | {s.wall_s:.1f} | "
                     f"{'OK' if s.ok else 'FAILED'} |")
    for s in summaries:
        for reason, n in s.dead_reasons.items():
            lines.append(f"\n- {s.transport}: {n} dead: {reason}")
        for problem in s.problems:
            lines.append(f"\n- {s.transport}: PROBLEM: {problem}")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def parse(argv: list[str] | None) -> tuple[list[str], Options, Path]:
    """Command-line flags into the transports, the options and the report path."""
    d = Options()
    p = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--transports", default=",".join(AVAILABLE),
                   help=f"comma-separated, from {', '.join(AVAILABLE)}")
    p.add_argument("--jobs", type=int, default=d.jobs)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--sleep-ms", type=float, default=d.sleep_ms, help="work per job")
    p.add_argument("--fail-rate", type=float, default=d.fail_rate, help="attempts failing (retried)")
    p.add_argument("--kill-every", type=float, default=d.kill_every, help="s between kill -9 (0: none)")
    p.add_argument("--terminate-every", type=float, default=d.terminate_every,
                   help="s between pg_terminate_backend rounds (0: none)")
    p.add_argument("--no-restart", action="store_true", help="do not restart the server")
    p.add_argument("--lease", type=float, default=d.lease, help="Postgres lease seconds")
    p.add_argument("--timeout", type=float, default=d.timeout, help="s before a run counts as hung")
    p.add_argument("--keep", action="store_true", help="keep the schema / queues for inspection")
    p.add_argument("--report", default=str(RESULTS / "chaos"), help="report path, without suffix")
    a = p.parse_args(argv)
    options = Options(jobs=a.jobs, concurrency=a.concurrency, sleep_ms=a.sleep_ms,
                      fail_rate=a.fail_rate, kill_every=a.kill_every,
                      terminate_every=a.terminate_every, restart=not a.no_restart, lease=a.lease,
                      timeout=a.timeout, keep=a.keep)
    return [t for t in a.transports.split(",") if t], options, Path(a.report)


def main(argv: list[str] | None = None) -> int:
    """Run every transport asked for; exit 1 if any run lost, hung or misbehaved."""
    transports, options, report = parse(argv)
    summaries = []
    for name in transports:
        backend = make_backend(name)
        with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as tmp:
            logs = report.parent / f"{report.name}-{name}-logs"
            summary = Run(backend, options, Path(tmp), logs).execute()
        print(summary.line(), flush=True)
        summaries.append(summary)
    write_report(summaries, options, report)
    print(f"report: {report.with_suffix('.md')}")
    return 0 if all(s.ok for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
