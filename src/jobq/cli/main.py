"""Command-line entry points: ``consumer``, ``producer`` and ``jobq`` (admin).

Exit codes: 0 done; 1 unexpected error, a hook failed, --once saw a receive or settle fail, or
`jobq jobs` found no job with that id;
2 a mistake, at once: config, arguments, a job refused at enqueue, a server refusing role/
database/password/vhost/TLS, no `jobq init`; 3 server unreachable or failing; 4 full; 130 signal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from jobq.cli import values
from jobq.cli.admin_args import ALIASES, SERVING, admin_parser, common_options
from jobq.cli.running import (
    EXIT_CONFIG,
    EXIT_FORCED,
    EXIT_OK,
    run_command,
)
from jobq.core.errors import ConfigError
from jobq.wiring.lean import import_container_lean

# The rest of jobq (config, logging, the commands and everything they import) is imported when
# a command runs, not with this module: `consumer` must take SIGTERM over as early as it can
# (consumer_main's first line), and these imports are most of a command's start-up time.


MAX_ATTEMPTS = "runs before a failing job is dead (default: retry.max_attempts, 5)"


def consumer_parser(prog: str = "consumer") -> argparse.ArgumentParser:
    """The ``consumer`` argument parser (also used to validate the compose commands)."""
    p = argparse.ArgumentParser(prog=prog, description=(
        "Run a jobq worker pool: take the queue's jobs as workers come free, run each with the "
        "processor (or the app's task for its kind), and settle it: done, retried with backoff, "
        "or dead. Runs until SIGTERM (running jobs finish within --shutdown-timeout; the ones "
        "not started go back to the queue), or with --once until nothing is due. Settings come "
        "from --config, then JOBQ_<SECTION>__<KEY> variables, then these options."))
    common_options(p)
    p.add_argument("--concurrency", "-n", type=int,
                   help="jobs run at once (default: consumer.concurrency, 32)")
    p.add_argument("--queues", type=values.queue_shares, metavar="QUEUE=N,...",
                   help="serve several queues, each with its own concurrency: mail=4,default=8 "
                        "(instead of --queue and --concurrency)")
    p.add_argument("--processor", "-p", help="built-in name or module:function")
    p.add_argument("--app", "-A", help="module:app, a jobq.App whose tasks run by kind")
    p.add_argument("--processor-arg", "-a", type=values.key_value, action="append", metavar="KEY=VALUE",
                   help="argument for the processor factory (repeatable)")
    p.add_argument("--once", action="store_true", help="run what is due, then exit (1 on failures)")
    p.add_argument("--claim", choices=("lease", "transaction"), help="Postgres claim mode")
    p.add_argument("--job-timeout", type=float,
                   help="seconds a job may run before it is interrupted and retried "
                        "(default: consumer.job_timeout, 300)")
    p.add_argument("--shutdown-timeout", type=float,
                   help="seconds running jobs get to finish after SIGTERM "
                        "(default: consumer.shutdown_timeout, 30)")
    p.add_argument("--max-attempts", type=int, help=MAX_ATTEMPTS)
    p.add_argument("--metrics-port", type=int, help="serve /metrics on this port")
    p.add_argument("--stats-json", help="write the run's counts and rate to this file")
    return p


def producer_parser(prog: str = "producer") -> argparse.ArgumentParser:
    """The ``producer`` argument parser."""
    p = argparse.ArgumentParser(prog=prog, description=(
        "Enqueue generated jobs ({\"n\": i} payloads, padded with --payload-size): to try a "
        "queue, to load it, and for the benchmark. Your application enqueues with the Python "
        "API (docs/how-to/enqueue.md)."))
    common_options(p)
    p.add_argument("--count", "-n", type=int, required=True, help="how many jobs")
    p.add_argument("--payload-size", type=int, default=0, help="padding bytes per payload")
    p.add_argument("--rate", type=float, default=0.0,
                   help="jobs/s, open loop: each job sent when due, confirms awaited meanwhile "
                        "(0: batches of --batch as fast as they are confirmed)")
    p.add_argument("--kind", default="demo", help="the jobs' kind (default demo)")
    p.add_argument("--batch", type=int, default=1000, help="jobs per enqueue call at most")
    p.add_argument("--max-attempts", type=int, help=MAX_ATTEMPTS)
    due = p.add_mutually_exclusive_group()
    due.add_argument("--delay", type=values.delay, default=0.0,
                     help="seconds before the jobs are due (e.g. 0.3, 90)")
    due.add_argument("--run-at", type=values.run_at, metavar="TIME",
                     help="when the jobs are due: an ISO 8601 time with its offset, e.g. "
                          "2026-12-24T18:00:00+01:00 or ...Z (a time in the past: now)")
    p.add_argument("--priority", type=int, default=0, choices=range(10), metavar="0-9",
                   help="the jobs' priority: a due job of a higher one runs first (default 0; "
                        "RabbitMQ: a classic queue with rabbitmq.max_priority)")
    p.add_argument("--stamp", action="store_true",
                   help="put the send time (epoch seconds) in each payload as sent_at")
    return p


def _dashboard(args: argparse.Namespace) -> int:
    """``jobq dashboard``: one Settings per --config."""
    from jobq.config import load_settings
    from jobq.observability.logs import configure

    try:
        # One try per page load: a server that is down shows as a banner at once, and the
        # next page load tries it again (dashboard/sources.py), instead of each page waiting
        # out connect.attempts of backoff.
        once = {"connect.attempts": 1, **({"queue": args.queue} if args.queue else {})}
        configs = [load_settings(path, {**once, **({"transport": t} if t else {})})
                   for path in (args.configs or [None]) for t in (args.transports or [None])]
        first = configs[0]
        configure(args.log_level or first.log.level, first.log.format,
                  transport=first.transport, queue=first.queue)
        from jobq.cli import commands

        return asyncio.run(commands.dashboard(
            configs, host=args.host or first.dashboard.host,
            port=first.dashboard.port if args.port is None else args.port,
            read_only=args.read_only, metrics=args.metrics or []))
    except ConfigError as exc:
        print(f"jobq: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_FORCED


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_OK)


def consumer_main(argv: Sequence[str] | None = None, prog: str = "consumer") -> int:
    """``consumer``: run the worker pool until SIGTERM (or, with --once, until drained)."""
    # Until the event loop takes the signals over, a SIGTERM means "nothing started yet: exit 0".
    signal.signal(signal.SIGTERM, _exit_quietly)
    args = consumer_parser(prog).parse_args(argv)
    import_container_lean()
    from jobq.cli.consume import consume
    from jobq.wiring.backstop import Backstop

    with Backstop(logging.getLogger("jobq")) as backstop:
        return run_command(lambda s: consume(s, stats_json=args.stats_json, backstop=backstop),
                           args, serves_queues=True)


def producer_main(argv: Sequence[str] | None = None, prog: str = "producer") -> int:
    """``producer``: enqueue ``--count`` generated jobs."""
    args = producer_parser(prog).parse_args(argv)
    import_container_lean()
    from jobq.cli import commands

    return run_command(lambda s: commands.produce(s, args), args)


def admin_main(argv: Sequence[str] | None = None) -> int:
    """``jobq``: init, stats, pause, resume, jobs, dead, prune, schedules; ``jobq consume`` and
    ``jobq enqueue`` are the ``consumer`` and ``producer`` commands under the package's name."""
    line = list(sys.argv[1:] if argv is None else argv)
    if line and line[0] in ALIASES:
        run = consumer_main if line[0] == "consume" else producer_main
        return run(line[1:], prog=f"jobq {line[0]}")
    args = admin_parser().parse_args(line)
    if args.command == "completion":
        from jobq.cli.completion import script

        print(script(args.shell, consumer_parser, producer_parser))
        return EXIT_OK
    # Admin commands log warnings only, INFO with -v; --log-level wins over either.
    level = None if args.command in SERVING else "info" if args.verbose else "warning"
    if args.command == "dead" and args.action != "list" and not (args.ids or args.dead_kind
                                                                 or args.all):
        print("jobq: config error: --id: say which dead jobs: --id N, --kind K or --all",
              file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "jobs" and (args.action == "list") == (args.id is not None):
        need = "takes no id (--state, --kind)" if args.action == "list" else "needs a job id"
        print(f"jobq: config error: id: jobs {args.action} {need}", file=sys.stderr)
        return EXIT_CONFIG
    import_container_lean()
    from jobq.cli import commands

    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "move":
        if args.source == args.target or args.batch < 1:
            print("jobq: config error: " + ("--to: the other backend than --from"
                                           if args.source == args.target
                                           else "--batch: at least 1"), file=sys.stderr)
            return EXIT_CONFIG
        return run_command(lambda s: commands.move_jobs(s, args), args, log_level=level)
    if args.command == "relay":
        if args.batch < 1:
            print("jobq: config error: --batch: at least 1", file=sys.stderr)
            return EXIT_CONFIG
        return run_command(lambda s: commands.relay(s, args), args)
    return run_command(lambda s: commands.admin(s, args), args, log_level=level)


if __name__ == "__main__":
    sys.exit(consumer_main())
