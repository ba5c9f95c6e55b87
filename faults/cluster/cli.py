"""The failover drills' command line: which drills, how big, how many rounds; one result line
per drill and a JSON/Markdown report (the fault suite's, with the drill's columns)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import FrameType

import faults.cluster as package
from faults.backend import Backend, Options
from faults.cluster.backends import ClusterPostgres, ClusterRabbit
from faults.cluster.nodes import RabbitCluster
from faults.cluster.run import ClusterRun, ClusterSummary
from faults.cluster.standby import PostgresPair
from faults.report import write_report
from faults.servers import ServerDown
from jobq.config import Settings

RESULTS = Path(__file__).resolve().parent.parent / "results"
DRILLS = ("rabbitmq", "postgres")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The drills' flags."""
    doc = package.__doc__ or ""
    p = argparse.ArgumentParser(prog="cluster", description=doc.split("\n\n")[0],
                                epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drills", default=",".join(DRILLS),
                   help=f"comma-separated, from {', '.join(DRILLS)}")
    p.add_argument("--jobs", type=int, default=20_000, help="jobs enqueued before the drain")
    p.add_argument("--produce", type=int, default=5_000,
                   help="jobs a producer enqueues during the drain, through the fault")
    p.add_argument("--produce-rate", type=float, default=500.0, help="the producer's jobs/s")
    p.add_argument("--consumers", type=int, default=3,
                   help="consumer processes (each starts at another node)")
    p.add_argument("--concurrency", type=int, default=16, help="workers per consumer")
    p.add_argument("--sleep-ms", type=float, default=20.0, help="work per job")
    p.add_argument("--promote-after", type=float, default=2.0,
                   help="s between the primary's crash and the standby's promotion (what a "
                        "failover manager takes to decide)")
    p.add_argument("--timeout", type=float, default=600.0, help="s before a drill counts as hung")
    p.add_argument("--repeat", type=int, default=1, help="rounds of every drill")
    p.add_argument("--rabbit-port", type=int, default=5781,
                   help="AMQP port of node 1 (nodes 2, 3 take the next; distribution ports +20000)")
    p.add_argument("--pg-port", type=int, default=5441, help="the primary's port (standby: +1)")
    p.add_argument("--report", default=str(RESULTS / "cluster"), help="report path, no suffix")
    args = p.parse_args(argv)
    args.drills = [d for d in args.drills.split(",") if d]
    unknown = sorted(set(args.drills) - set(DRILLS))
    if unknown or args.repeat < 1:
        p.error(f"unknown drill {unknown}" if unknown else "--repeat: at least 1")
    return args


@contextmanager
def servers_for(drill: str, args: argparse.Namespace
                ) -> Iterator[tuple[Backend, Callable[[], Settings]]]:
    """Start the drill's servers; stop and delete them however the drill ends."""
    if drill == "rabbitmq":
        cluster = RabbitCluster(args.rabbit_port)
        try:
            cluster.start()
            rabbit = ClusterRabbit(cluster)
            yield rabbit, rabbit.producer_settings
        finally:
            cluster.stop()
    else:
        pair = PostgresPair(args.pg_port)
        try:
            pair.start()
            postgres = ClusterPostgres(pair, args.promote_after)
            yield postgres, postgres.producer_settings
        finally:
            pair.stop()


def run_drill(drill: str, args: argparse.Namespace, run: int) -> ClusterSummary:
    """One drill on fresh servers; its consumer logs kept beside the report if it fails."""
    options = Options(jobs=args.jobs, consumers=args.consumers, concurrency=args.concurrency,
                      sleep_ms=args.sleep_ms, kill_every=0, terminate_every=0,
                      server_fault="crash", timeout=args.timeout, repeat=args.repeat)
    report = Path(args.report)
    with tempfile.TemporaryDirectory(prefix=f"cluster-{drill}-") as tmp, \
            servers_for(drill, args) as (backend, settings):
        logs = report.parent / f"{report.name}-{drill}-run{run}-logs"
        return ClusterRun(backend, settings, options, Path(tmp), logs, run, args.produce,
                          args.produce_rate).execute()  # type: ignore[return-value]


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the servers_for blocks stop the drill's servers


def main(argv: list[str] | None = None) -> int:
    """Every drill asked for, ``--repeat`` times; exit 1 if any failed, 2 if a server did not
    start."""
    args = parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    report = Path(args.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    # What the drivers of the harness's own producer log through the failover (reconnects,
    # refused connections) goes to a file: the result lines count its errors.
    logging.basicConfig(filename=report.with_suffix(".log"), filemode="w", level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summaries: list[ClusterSummary] = []
    try:
        for run in range(1, args.repeat + 1):
            for drill in args.drills:
                summaries.append(run_drill(drill, args, run))
                print(summaries[-1].line(args.repeat), flush=True)
                write_report(list(summaries), Options(jobs=args.jobs), report)
    except ServerDown as exc:
        print(f"cluster: FATAL: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cluster: interrupted; the drill's servers were stopped and deleted", file=sys.stderr)
        return 130
    report.with_suffix(".json").write_text(json.dumps(
        {"args": vars(args), "runs": [asdict(s) | {"ok": s.ok, "failures": s.failures}
                                      for s in summaries]}, indent=2))
    passed = sum(s.ok for s in summaries)
    print(f"cluster: {passed}/{len(summaries)} drills OK; report: {report.with_suffix('.md')}")
    return 0 if passed == len(summaries) else 1
