"""`make chaos`: the fault suite. Not part of the default test run (it restarts and crashes the
servers).

For each transport: enqueue N jobs (default 50,000) through the Python API, keeping the ids it
returned; start three consumers whose processor appends each finished job id to a file of its
own (tests.processors:record, the independent completion record); then, until every job has
ended, ``kill -9`` a random consumer every few seconds and start a new one, restart the server
gracefully at 30 % progress and crash it at 60 % (--server-fault; faults/server_faults.py), and
for Postgres cut the consumers' backends with pg_terminate_backend every few seconds, for
RabbitMQ close their AMQP connections. The first consumer is never
killed (the witness: it lives through every fault). At the end the consumers that were never
killed must still be alive and exit 0 on SIGTERM; from the record and the backend's own final
state, the pass condition (faults/verdict.py): nothing lost (accepted, neither recorded nor
dead, or done without a record), every job done or dead, no job dead (none is meant to die),
none recorded both done and dead, duplicates at most capacity x exposures (+ the jobs of the
crash windows). A consumer that
hangs (the run times out, or it outlives SIGTERM) has its stacks (py-spy, SIGUSR1) and log
tail put in the report before it is killed. One summary line per transport and round; a JSON
and a Markdown report.

    python -m faults                      # everything, 50,000 jobs per transport
    python -m faults --jobs 5000 --transports postgres-lease --no-restart
    python -m faults --jobs 5000 --server-fault crash
    python -m faults --repeat 10          # ten rounds of every transport
"""

from __future__ import annotations

import asyncio
import collections
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from faults import servers, stacks
from faults.backend import Backend, Options, capacity, consumer_settings
from faults.cli import make_backend, parse, supervise
from faults.report import Summary, write_report
from faults.server_faults import ServerFaults
from faults.verdict import duplicate_bound, tally
from tests.processors import completions


def handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler of its own for SIGTERM yet (Linux: the SigCgt
    mask of /proc/<pid>/status); False once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")),
                  "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


@dataclass
class Consumer:
    """One consumer process and where its stderr goes."""

    proc: subprocess.Popen[bytes]
    log: Path
    killed: bool = False
    witness: bool = False  # never killed: it must live through every fault and stop cleanly


class Run:
    """One transport under faults."""

    def __init__(self, backend: Backend, options: Options, workdir: Path, logs_to: Path,
                 run: int = 1) -> None:
        self.backend = backend
        self.logs_to = logs_to  # where the consumers' stderr is kept when the run fails
        self.options = options
        self.workdir = workdir
        self.record = workdir / "record"
        self.consumers: list[Consumer] = []
        self.summary = Summary(transport=backend.name, run=run, jobs=options.jobs)
        self.rand = random.Random()
        self.server_faults = ServerFaults(backend, self.summary, self.record, options.server_fault)

    def start_consumer(self) -> Consumer:
        """Start one more consumer, its stderr in a file of its own."""
        argv, env = self.backend.consumer_command(self.record, self.options, len(self.consumers))
        if not self.summary.capacity:  # every consumer is started with the same settings
            self.summary.capacity = capacity(consumer_settings(argv, env))
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
        self.summary.exposures += 1
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
                for consumer in self.live():  # which of them stopped working, and where
                    self.take_stacks(consumer)
                return
            if not self.server_faults.step(remaining, len(self.live())):
                return  # its server did not come back: the problem says so
            if opts.kill_every > 0 and now >= next_kill:
                self.kill_one()
                next_kill = now + self.rand.uniform(0.5, 1.5) * opts.kill_every
            if opts.terminate_every > 0 and now >= next_cut:
                self.cut()
                next_cut = now + self.rand.uniform(0.5, 1.5) * opts.terminate_every

    def cut(self) -> None:
        """One round of cut connections; a round that could not be injected is a problem."""
        try:
            cut = self.backend.disrupt({c.proc.pid for c in self.live()})
        except RuntimeError as exc:
            self.summary.problems.append(f"could not cut connections: {exc}")
            return
        self.summary.terminated_backends += cut.connections
        self.summary.exposures += cut.consumers

    def take_stacks(self, consumer: Consumer) -> None:
        """Put a hung consumer's stacks and log tail in the report (it is still running)."""
        if consumer.proc.poll() is None:
            self.summary.stacks[consumer.log.name] = stacks.capture(consumer.proc.pid, consumer.log)

    def stop_survivors(self) -> None:
        """SIGTERM every consumer we did not kill; each must be alive and exit 0.

        Not before each handles the signal: a replacement started just before the end may
        still be importing Python modules (seconds on a loaded machine), and a SIGTERM then
        ends it as it ends any process (exit -15), before jobq has anything to stop."""
        survivors = self.live()
        self.summary.survivors = len(survivors)
        deadline = time.monotonic() + 60
        for consumer in survivors:
            while (consumer.proc.poll() is None and not handles_sigterm(consumer.proc.pid)
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            if consumer.proc.poll() is None:
                consumer.proc.send_signal(signal.SIGTERM)
        for consumer in survivors:
            try:
                code = consumer.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.take_stacks(consumer)
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
        s = self.summary
        s.duplicate_bound = duplicate_bound(s.capacity, s.exposures, s.crash_window_jobs)
        try:
            state = self.backend.final_state(accepted)
        except (RuntimeError, OSError) as exc:  # not knowing where the jobs ended is a failure
            s.problems.append(f"could not read the final state: {exc}")
            return
        recorded = collections.Counter(completions(self.record))
        found = tally(accepted, recorded, state.done, state.dead, state.waiting)
        s.lost, s.duplicates = len(found.lost), found.duplicates
        s.done, s.dead, s.done_and_dead = len(state.done), len(state.dead), len(found.done_and_dead)
        s.unfinished = state.unfinished
        s.dead_reasons = dict(collections.Counter(state.dead.values()).most_common(10))
        s.problems.extend(state.problems)
        for what, ids in (("lost ids", found.lost), ("done without a completion", found.done_unrecorded),
                          ("recorded done and dead", found.done_and_dead),
                          ("recorded ids never enqueued", found.strangers)):
            if ids:
                s.problems.append(f"{what} (first 10): {sorted(ids, key=_order)[:10]}")

    def keep_logs(self) -> None:
        """Copy the processes' stderr where the report says (the run failed)."""
        self.logs_to.mkdir(parents=True, exist_ok=True)
        for log in self.workdir.glob("*.err"):
            shutil.copy(log, self.logs_to / log.name)
        self.summary.problems.append(f"logs kept in {self.logs_to}")

    def execute(self) -> Summary:
        """Set up, shake, stop, check; always bring the server back (ServerDown if it does not
        come back) and clean up."""
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
                self.keep_logs()
        finally:
            with servers.sigint_deferred():  # a (second) Ctrl-C must not leave a server down
                for consumer in self.consumers:
                    if consumer.proc.poll() is None:
                        consumer.proc.kill()
                        consumer.proc.wait()
                self.backend.ensure_up()
                if not self.options.keep:
                    self.backend.cleanup()
        return self.summary


def _order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


def run_one(name: str, options: Options, report: Path, run: int) -> Summary:
    """One run of transport ``name`` in a directory of its own; its logs kept if it fails."""
    with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as tmp:
        tag = f"-run{run}" if options.repeat > 1 else ""
        logs = report.parent / f"{report.name}-{name}{tag}-logs"
        return Run(make_backend(name), options, Path(tmp), logs, run).execute()


def main(argv: list[str] | None = None) -> int:
    """Run every transport asked for, ``--repeat`` times; exit 1 if any run failed."""
    transports, options, report = parse(argv, __doc__)

    def runs() -> Iterator[Summary]:
        summaries: list[Summary] = []
        for run in range(1, options.repeat + 1):
            for name in transports:
                summaries.append(run_one(name, options, report, run))
                print(summaries[-1].line(options.repeat), flush=True)
                write_report(summaries, options, report)  # after each run: a hang later keeps it
                yield summaries[-1]

    return supervise("chaos", runs(), report)


if __name__ == "__main__":
    sys.exit(main())
