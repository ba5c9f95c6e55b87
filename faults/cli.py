"""The fault suite's command line (faults/suite.py runs it) and the backend of each transport name."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from faults import servers
from faults.backend import Backend, Options
from faults.postgres import PostgresBackend
from faults.rabbitmq import RabbitBackend
from faults.server_faults import KINDS

RESULTS = Path(__file__).resolve().parent / "results"
LEFT_RUNNING = ("The servers are always left running: whatever the suite stopped or crashed, it "
                "starts again and waits for (bounded) at the end of each run, also when the run "
                "fails or is interrupted with Ctrl-C. A server that does not come back ends the "
                "suite with exit 2 and a FATAL line.")
AVAILABLE = ("postgres-lease", "postgres-transaction", "rabbitmq-quorum", "rabbitmq-classic")


def make_backend(name: str) -> Backend:
    """The backend called ``name`` (postgres-lease, postgres-transaction, ...)."""
    if name in ("postgres-lease", "postgres-transaction"):
        return PostgresBackend(name.removeprefix("postgres-"))
    if name in ("rabbitmq-quorum", "rabbitmq-classic"):
        return RabbitBackend(name.removeprefix("rabbitmq-"))
    raise SystemExit(f"chaos: unknown transport {name!r}")


def parse(argv: list[str] | None, doc: str | None) -> tuple[list[str], Options, Path]:
    """Command-line flags into the transports, the options and the report path (``doc``: the
    suite's, its first paragraph the description)."""
    d = Options()
    p = argparse.ArgumentParser(prog="chaos", description=doc.split("\n\n")[0] if doc else "",
                                epilog=LEFT_RUNNING)
    p.add_argument("--transports", default=",".join(AVAILABLE),
                   help=f"comma-separated, from {', '.join(AVAILABLE)}")
    p.add_argument("--jobs", type=int, default=d.jobs)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--sleep-ms", type=float, default=d.sleep_ms, help="work per job")
    p.add_argument("--fail-rate", type=float, default=d.fail_rate, help="attempts failing (retried)")
    p.add_argument("--kill-every", type=float, default=d.kill_every, help="s between kill -9 (0: none)")
    p.add_argument("--terminate-every", type=float, default=d.terminate_every,
                   help="s between rounds of cut connections: pg_terminate_backend, AMQP "
                        "close_connection (0: none)")
    p.add_argument("--server-fault", choices=KINDS, default=d.server_fault,
                   help="restart: graceful, at 30%% of the jobs; crash: pg_ctlcluster stop -m "
                        "immediate, kill -9 of beam.smp, then started again; both: restart at "
                        "30%%, crash at 60%%; none")
    p.add_argument("--no-restart", action="store_true", help="no server fault (--server-fault none)")
    p.add_argument("--lease", type=float, default=d.lease, help="Postgres lease seconds")
    p.add_argument("--timeout", type=float, default=d.timeout, help="s before a run counts as hung")
    p.add_argument("--keep", action="store_true", help="keep the schema / queues for inspection")
    p.add_argument("--repeat", type=int, default=d.repeat, help="rounds of every transport")
    p.add_argument("--report", default=str(RESULTS / "chaos"), help="report path, without suffix")
    a = p.parse_args(argv)
    options = Options(jobs=a.jobs, concurrency=a.concurrency, sleep_ms=a.sleep_ms,
                      fail_rate=a.fail_rate, kill_every=a.kill_every,
                      terminate_every=a.terminate_every,
                      server_fault="none" if a.no_restart else a.server_fault, lease=a.lease,
                      timeout=a.timeout, keep=a.keep, repeat=a.repeat)
    if options.repeat < 1:
        p.error("--repeat: at least 1")
    return [t for t in a.transports.split(",") if t], options, Path(a.report)


class Finished(Protocol):
    """A run's summary, as far as the suite's exit code needs it."""

    @property
    def ok(self) -> bool: ...


def supervise(prog: str, runs: Iterator[Finished], report: Path) -> int:
    """Take every run ``runs`` makes (each printed and reported as it ends), then the last line
    and the exit code: 0 all OK, 1 some failed, 2 a server did not come back, 130 Ctrl-C (the
    servers a run stopped were started again either way)."""
    summaries: list[Finished] = []
    try:
        summaries.extend(runs)
    except servers.ServerDown as exc:
        print(f"{prog}: FATAL: {exc}; start it by hand (.ci/run shows how)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; every server it stopped was started again", file=sys.stderr)
        return 130
    passed = sum(s.ok for s in summaries)
    print(f"{prog}: {passed}/{len(summaries)} runs OK; report: {report.with_suffix('.md')}")
    return 0 if passed == len(summaries) else 1
