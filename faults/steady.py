"""`make chaos-steady`: faults under a steady offered load, and what they cost the tail.

The drain suite (faults/suite.py) asks whether anything is lost; this one also asks what a
fault costs the jobs that arrive while it lasts. For each scenario (faults/scenarios.py) and
transport: two consumers, production settings (a 12 s lease, the default rescue interval), a
producer enqueueing at ``--rate`` jobs/s with each job stamped at hand-over, every job 5 ms of
I/O. A warm-up, a clean phase (20 s), the fault window, and 20 s more of load; then every job
must end. From the completion record (faults/timeline.py), the run passes when:

- nothing is lost, no job is stuck or dead, duplicates within capacity x exposures (as in the
  drain suite), the producer sent every job, and every surviving consumer exits 0 on SIGTERM;
- throughput is back within 60 s of the last fault: the backlog (sent, not yet finished) is
  back to twice its clean peak (at least 10 jobs) and stays there for 5 s (or until the
  queue has drained, when the load ends sooner);
- for ``kills``, the tail held: p99 latency of the jobs sent during the kills under 10x the
  clean phase's.

    python -m faults.steady                              # every scenario, each transport
    python -m faults.steady --scenarios kills --transports postgres-lease --repeat 3
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import conninfo, sql

from benchmarks.processors import read_records
from faults import servers
from faults.backend import BIN, Backend, Options
from faults.cli import RESULTS, make_backend, supervise
from faults.scenarios import SCENARIOS, Scenario
from faults.steady_report import Load, SteadySummary, judge, write_report
from faults.suite import Run, handles_sigterm
from faults.upkeep import Vacuum


class SteadyRun(Run):
    """One scenario on one transport under a steady load."""

    def __init__(self, backend: Backend, scenario: Scenario, load: Load, workdir: Path,
                 logs_to: Path, run: int = 1) -> None:
        self.scenario, self.load = scenario, load
        self.count = int(load.rate * (load.warmup + load.clean + scenario.window + load.tail))
        record = workdir / "record"
        lead = load.warmup + load.clean  # s of load before the window opens
        blockers = ",".join(str(int(load.rate * (lead + b))) for b in scenario.blocks)
        work = ("-p", "faults.work:steady", "-a", f"dir={record}", "-a", f"ms={load.ms:g}",
                *(("-a", f"block_at={blockers}", "-a", f"block_s={load.block_s:g}")
                  if blockers else ()))
        options = Options(jobs=self.count, consumers=2, concurrency=load.concurrency,
                          lease=load.lease, rescue_interval=None, server_fault="none",
                          processor=work)
        super().__init__(backend, options, workdir, logs_to, run)
        self.steady = SteadySummary(scenario=scenario.name, transport=backend.name, run=run,
                                    jobs=self.count, chaos=self.summary)
        self.held: list[psycopg.Connection[tuple[object, ...]]] = []
        self.producer: subprocess.Popen[bytes] | None = None

    def backend_dsn(self) -> str:
        """The PostgreSQL server's DSN (the saturate scenario fills it)."""
        return str(getattr(self.backend, "dsn"))  # noqa: B009  # PostgresBackend only

    def cut(self, through: psycopg.Connection[tuple[object, ...]] | None = None) -> None:
        """One round of cut connections; ``through`` a connection of our own (a full server)."""
        if through is None:
            return super().cut()
        cut = getattr(self.backend, "cut_through")(through)  # noqa: B009  # PostgresBackend only
        self.summary.terminated_backends += cut.connections
        self.summary.exposures += cut.consumers
        return None

    def release(self) -> None:
        """Give back the connection slots a saturate event took."""
        while self.held:
            self.held.pop().close()

    def start_producer(self) -> None:
        """The real `producer`, open-loop at the offered rate, each job stamped."""
        argv, env = self.backend.consumer_command(self.record, self.options, 0)
        config = argv[1:argv.index("-p")]  # --config and --queue, as the consumers have them
        if "JOBQ_PG_DSN" in env:  # not one of the consumers' connections: never cut
            env["JOBQ_PG_DSN"] = conninfo.make_conninfo(env["JOBQ_PG_DSN"],
                                                        application_name="jobq-steady-producer")
        cmd = [str(BIN / "producer"), *config, "--count", str(self.count), "--rate",
               f"{self.load.rate:g}", "--stamp", "--kind", "steady", "--log-level", "warning"]
        with (self.workdir / "producer.err").open("wb") as err:
            self.producer = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def first_sent(self, timeout: float = 60.0) -> float:
        """The first job's hand-over stamp, once some job has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_exits()
            stamps = [e.sent_at for e in read_records(self.record)]
            if stamps:
                return min(stamps)
            time.sleep(0.1)
        raise RuntimeError(f"no job finished within {timeout:g}s of the producer's start")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every consumer handles SIGTERM (jobq's own handlers are in place)."""
        deadline = time.monotonic() + timeout
        while not all(handles_sigterm(c.proc.pid) for c in self.live()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the consumers were not up within {timeout:g}s")
            self.check_exits()
            time.sleep(0.05)

    def inject(self, opens: float) -> None:
        """Run the scenario's events at their times (wall clock, ``opens`` the window)."""
        for at, event in self.scenario.events:
            while time.time() < opens + at:
                self.check_exits()
                time.sleep(min(0.05, max(0.0, opens + at - time.time())))
            event(self)
        while time.time() < opens + self.scenario.window:
            self.check_exits()
            time.sleep(0.1)

    def drain(self) -> None:
        """Wait for the producer to end, then for every job to end (or the drain deadline)."""
        assert self.producer is not None
        code = self.producer.wait(timeout=self.count / self.load.rate + 120)
        if code != 0:
            tail = (self.workdir / "producer.err").read_text(errors="replace").splitlines()[-3:]
            self.summary.problems.append(f"producer exited {code}: {tail}")
        deadline = time.monotonic() + self.load.drain
        while (remaining := self.backend.remaining()) != 0:
            if time.monotonic() > deadline:
                self.summary.problems.append(
                    f"stuck: {remaining} jobs unfinished {self.load.drain:g}s after the last was sent")
                for consumer in self.live():
                    self.take_stacks(consumer)
                return
            self.check_exits()
            time.sleep(0.25)

    def vacuum(self) -> Vacuum | None:
        """A started Vacuum of the queue's table when the server's autovacuum is off."""
        schema = getattr(self.backend, "schema", None)
        if schema is None or not Vacuum.needed(self.backend_dsn()):
            return None
        vacuum = Vacuum(self.backend_dsn(), sql.Identifier(schema, "jobs"))
        vacuum.start()
        return vacuum

    def execute_steady(self) -> SteadySummary:
        """Set up, load, inject, drain, stop, judge; always release and clean up."""
        vacuum = None
        try:
            self.backend.setup()
            vacuum = self.vacuum()
            for _ in range(self.options.consumers):
                self.start_consumer()
            self.consumers[0].witness = True
            self.wait_ready()
            self.start_producer()
            t0 = self.first_sent()
            opens = t0 + self.load.warmup + self.load.clean
            try:
                self.inject(opens)
            finally:
                self.release()
            self.drain()
            self.stop_survivors()
            state = self.backend.final_state([])
            judge(self.steady, read_records(self.record), state, self.load,
                  self.scenario, clean_from=t0 + self.load.warmup, opens=opens)
        except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error) as exc:
            self.summary.problems.append(f"{type(exc).__name__}: {exc}")  # the next run goes on
        finally:
            if vacuum is not None:
                vacuum.stop()
                self.steady.vacuums = vacuum.runs
            with servers.sigint_deferred():
                self.release()
                for proc in [c.proc for c in self.consumers] + [self.producer]:
                    if proc is not None and proc.poll() is None:
                        proc.kill()
                        proc.wait()
                self.backend.ensure_up()
                self.backend.cleanup()
        return self.steady


def parse(argv: list[str] | None) -> tuple[list[str], list[str], Load, int, Path]:
    """Command-line flags: scenarios, transports, the load, repeats, the report path."""
    d = Load()
    p = argparse.ArgumentParser(prog="python -m faults.steady",
                                description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated, from {', '.join(SCENARIOS)}")
    p.add_argument("--transports", default="",
                   help="comma-separated; default: every transport each scenario applies to")
    p.add_argument("--rate", type=float, default=d.rate, help="offered jobs/s")
    p.add_argument("--ms", type=float, default=d.ms, help="work per job (ms of I/O)")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="per consumer")
    p.add_argument("--repeat", type=int, default=1, help="rounds of every scenario")
    p.add_argument("--report", default=str(RESULTS / "steady"), help="report path, no suffix")
    a = p.parse_args(argv)
    scenarios = [s for s in a.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        p.error(f"--scenarios: unknown {unknown}")
    load = Load(rate=a.rate, ms=a.ms, concurrency=a.concurrency)
    return scenarios, [t for t in a.transports.split(",") if t], load, a.repeat, Path(a.report)


def main(argv: list[str] | None = None) -> int:
    """Every scenario on each of its transports, ``--repeat`` times; exit 1 if any failed."""
    scenarios, transports, load, repeat, report = parse(argv)

    def runs() -> Iterator[SteadySummary]:
        summaries: list[SteadySummary] = []
        for run in range(1, repeat + 1):
            for name in scenarios:
                scenario = SCENARIOS[name]
                for transport in [t for t in scenario.transports if not transports or t in transports]:
                    with tempfile.TemporaryDirectory(prefix=f"steady-{name}-") as tmp:
                        logs = report.parent / f"{report.name}-{name}-{transport}-run{run}-logs"
                        one = SteadyRun(make_backend(transport), scenario, load, Path(tmp), logs, run)
                        summaries.append(one.execute_steady())
                        if not summaries[-1].ok:
                            one.keep_logs()
                            shutil.copytree(one.record, one.logs_to / "record")
                    print(summaries[-1].line(), flush=True)
                    write_report(summaries, load, report)
                    yield summaries[-1]

    return supervise("chaos-steady", runs(), report)


if __name__ == "__main__":
    sys.exit(main())
