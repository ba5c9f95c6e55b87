"""Command-line entry points: ``consumer``, ``producer`` and ``jobq`` (admin).

Exit codes: 0 done; 1 unexpected error, a hook failed, or --once saw a receive or settle fail;
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
from typing import Any

from jobq.cli import values
from jobq.cli.running import (
    EXIT_CONFIG,
    EXIT_FORCED,
    EXIT_OK,
    run_command,
)
from jobq.core.errors import ConfigError

# The rest of jobq (config, logging, the commands and everything they import) is imported when
# a command runs, not with this module: `consumer` must take SIGTERM over as early as it can
# (consumer_main's first line), and these imports are most of a command's start-up time.


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML config file (default: $JOBQ_CONFIG)")
    parser.add_argument("--transport", "-t", choices=("postgres", "rabbitmq"))
    parser.add_argument("--queue", "-q")
    parser.add_argument("--log-format", choices=("text", "json"))
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"))




def consumer_parser() -> argparse.ArgumentParser:
    """The ``consumer`` argument parser (also used to validate the compose commands)."""
    p = argparse.ArgumentParser(prog="consumer", description="Run a jobq worker pool.")
    _common(p)
    p.add_argument("--concurrency", "-n", type=int)
    p.add_argument("--queues", type=values.queue_shares, metavar="QUEUE=N,...",
                   help="serve several queues, each with its own concurrency: mail=4,default=8 "
                        "(instead of --queue and --concurrency)")
    p.add_argument("--processor", "-p", help="built-in name or module:function")
    p.add_argument("--app", "-A", help="module:app, a jobq.App whose tasks run by kind")
    p.add_argument("--processor-arg", "-a", type=values.key_value, action="append", metavar="KEY=VALUE",
                   help="argument for the processor factory (repeatable)")
    p.add_argument("--once", action="store_true", help="run what is due, then exit (1 on failures)")
    p.add_argument("--claim", choices=("lease", "transaction"), help="Postgres claim mode")
    p.add_argument("--job-timeout", type=float)
    p.add_argument("--shutdown-timeout", type=float)
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--metrics-port", type=int, help="serve /metrics on this port")
    p.add_argument("--stats-json", help="write the run's counts and rate to this file")
    return p


def producer_parser() -> argparse.ArgumentParser:
    """The ``producer`` argument parser."""
    p = argparse.ArgumentParser(prog="producer", description="Enqueue generated jobs.")
    _common(p)
    p.add_argument("--count", "-n", type=int, required=True)
    p.add_argument("--payload-size", type=int, default=0, help="padding bytes per payload")
    p.add_argument("--rate", type=float, default=0.0,
                   help="jobs/s, open loop: each job sent when due, confirms awaited meanwhile "
                        "(0: batches of --batch as fast as they are confirmed)")
    p.add_argument("--kind", default="demo")
    p.add_argument("--batch", type=int, default=1000, help="jobs per enqueue call at most")
    p.add_argument("--max-attempts", type=int)
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


PAUSE_HELP = {  # sub-command -> (one line for `jobq --help`, its own --help)
    "pause": ("stop the queue's consumers taking new jobs (until `jobq resume`)",
              "Pause the queue: within about a second every consumer of it stops taking new "
              "jobs. Jobs already running finish and are settled as usual; jobs a consumer had "
              "received but not started go back to the queue, their attempt not counted. "
              "Nothing is lost, and new jobs can still be enqueued. The pause is kept on the "
              "server, so it holds for consumers started later too, until `jobq resume`. "
              "`jobq stats` shows it. Pausing a paused queue changes nothing (and says so)."),
    "resume": ("let the queue's consumers take jobs again",
               "Resume a paused queue: within about a second its consumers take jobs again. "
               "Resuming a queue that is not paused changes nothing (and says so)."),
}


def admin_parser() -> argparse.ArgumentParser:
    """The ``jobq`` admin argument parser."""
    p = argparse.ArgumentParser(prog="jobq", description="jobq administration.")
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="create or upgrade the schema / topology")
    _common(init)
    init.add_argument("--print-sql", action="store_true", help="print the migrations, run none")
    stats = sub.add_parser("stats", help="queue depth by state, and whether it is paused")
    _common(stats)
    stats.add_argument("--json", action="store_true")
    for name, text in PAUSE_HELP.items():
        _common(sub.add_parser(name, help=text[0], description=text[1]))
    dead = sub.add_parser("dead", help="dead-letter management")
    _common(dead)
    dead.add_argument("action", choices=("list", "requeue", "purge"))
    dead.add_argument("--id", action="append", dest="ids",
                      help="a job id (repeatable; on RabbitMQ the message_id, any text)")
    dead.add_argument("--kind", dest="dead_kind", help="every dead job of this kind")
    dead.add_argument("--all", action="store_true", help="every dead job of the queue")
    dead.add_argument("--limit", type=int, default=100)
    dead.add_argument("--json", action="store_true")
    _jobs_parser(sub)
    board = sub.add_parser(
        "dashboard", help="a web page over the queues: depth, jobs, dead letters, actions",
        description="Serve a web dashboard over one or more queues (one --config each, on either "
                    "backend): depth by state, pause, a chart of the waiting jobs, jobs by state "
                    "with search by id and kind, each job's payload, headers, attempts, error and "
                    "times, and actions: pause and resume, cancel, retry now, requeue and purge "
                    "dead letters. It binds 127.0.0.1 unless told otherwise. Every action needs "
                    "dashboard.token (give it as JOBQ_DASHBOARD__TOKEN): a login with it sets a "
                    "session cookie, and every form carries a token against cross-site "
                    "requests. Without a token, or with --read-only, it only shows. A backend "
                    "that does not answer shows as a banner on its queue; the next page load "
                    "tries it again. On RabbitMQ the jobs it can list are the dead ones (`jobq "
                    "jobs --help` says why).")
    board.add_argument("--config", "-c", action="append", dest="configs", metavar="CONFIG",
                       help="a queue's config (repeatable: several queues, either backend; "
                            "default $JOBQ_CONFIG)")
    board.add_argument("--transport", "-t", action="append", dest="transports",
                       choices=("postgres", "rabbitmq"),
                       help="a backend (repeatable): each --config's queue on each one given "
                            "(default: the config's transport)")
    board.add_argument("--queue", "-q", help="the queue, for every --config")
    board.add_argument("--host", help="address to listen on (default dashboard.host: 127.0.0.1)")
    board.add_argument("--port", type=int, help="port (default dashboard.port: 9820)")
    board.add_argument("--read-only", action="store_true", help="show, never act")
    board.add_argument("--metrics", action="append", metavar="URL",
                       help="a consumer's /metrics URL (repeatable): the pages chart each "
                            "queue's jobs done per second from them (default dashboard.metrics)")
    board.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    move = sub.add_parser(
        "move", help="move a queue's pending or dead jobs to the other backend",
        description="Move the queue's waiting (--state pending: due and delayed) or dead jobs "
                    "from one backend to the other, a batch at a time, so that a queue that "
                    "still holds jobs can switch backend: stop its consumers, move, start the "
                    "consumers of the other backend. Each job keeps its id (on PostgreSQL only "
                    "an integer id: jobq's RabbitMQ ids are; another gets a new one, counted), "
                    "its attempts, what is left of its delay, its priority and its last error. "
                    "The source lets go of a batch only once the target has it (committed, or "
                    "confirmed): killed halfway, a move loses nothing, and the batch in flight "
                    "may be in both (moved twice, under the same id; moved into PostgreSQL "
                    "again, it goes in once). Reads postgres.* and rabbitmq.* of the config. "
                    "RabbitMQ as the source: its consumers must be stopped (refused otherwise), "
                    "and --kind applies to dead jobs only.")
    _common(move)
    move.add_argument("--from", dest="source", required=True, choices=("postgres", "rabbitmq"))
    move.add_argument("--to", dest="target", required=True, choices=("postgres", "rabbitmq"))
    move.add_argument("--state", choices=("pending", "dead"), default="pending",
                      help="which jobs (default pending: due and delayed; never running ones)")
    move.add_argument("--kind", dest="move_kind", help="only jobs of this kind")
    move.add_argument("--batch", type=int, default=500, help="jobs per batch (default 500)")
    relay = sub.add_parser(
        "relay", help="publish a PostgreSQL queue's jobs to RabbitMQ (transactional enqueue)",
        description="Publish the jobs of a PostgreSQL queue to the RabbitMQ queue of the same "
                    "name, until SIGTERM: enqueue on PostgreSQL inside your own transaction "
                    "(connection=...), and a job reaches RabbitMQ if and only if that "
                    "transaction committed. Each batch is one transaction: taken in hand-out "
                    "order, published with confirms under its PostgreSQL id, then marked done. "
                    "At least once: a relay killed mid-batch publishes that batch again (the "
                    "same message_ids), never loses one. Several relays may run at once: one "
                    "takes a queue's batch at a time, each after the last was confirmed. A job "
                    "RabbitMQ cannot take (payload not a JSON object, too large) is "
                    "dead-lettered on PostgreSQL with the reason. Reads postgres.* "
                    "and rabbitmq.* of the config (give the broker with JOBQ_RABBITMQ__URL or a "
                    "rabbitmq: section); run no PostgreSQL consumer on the queue. Delayed jobs "
                    "are relayed at once and wait in RabbitMQ for the rest of their delay.")
    _common(relay)
    relay.add_argument("--batch", type=int, default=500, help="jobs per transaction (default 500)")
    relay.add_argument("--once", action="store_true",
                       help="relay what is pending now, then exit")
    prune = sub.add_parser(
        "prune", help="delete finished jobs older than their retention",
        description="Delete the queue's finished jobs that ended more than --older-than ago "
                    "(default: postgres.retention of their state), and print how many. "
                    "PostgreSQL: done and dead rows, postgres.retention.batch rows per DELETE, "
                    "under the lock the consumers' pruner takes (a consumer's round in progress "
                    "is waited for); their space is reused once (auto)vacuum has run. RabbitMQ: "
                    "dead letters in <queue>.dead whose x-jobq-dead-at is older; the younger ones "
                    "stay, in their places.",
        epilog="Durations: 30s, 15m, 12h, 1d, 14d, or a number of seconds. With neither "
               "--older-than nor a retention for a state asked for, nothing is deleted and the "
               "exit code is 2.")
    _common(prune)
    prune.add_argument("--older-than", type=values.duration, metavar="D",
                       help="delete jobs that ended more than D ago (default: "
                            "postgres.retention.<state>; required on RabbitMQ)")
    prune.add_argument("--state", choices=("done", "dead"),
                       help="only this state (default: PostgreSQL both, or with no --older-than "
                            "those with a retention; RabbitMQ dead, the only one it keeps)")
    schedules = sub.add_parser(
        "schedules", help="the periodic schedules of the config, their last tick and next run",
        description="List the config's schedules: what each enqueues, the last tick fired (as "
                    "the backend records it) and the next run. Consumers fire the ticks.")
    _common(schedules)
    schedules.add_argument("--json", action="store_true")
    return p


JOBS_HELP = (
    "Find and steer single jobs of the queue.\n\n"
    "  show ID      one job: state, kind, payload, headers, attempts, last error, times\n"
    "  list         jobs in --state (default pending), of --kind if given, at most --limit: "
    "pending ones\n               in the order they will run, finished ones newest first\n"
    "  cancel ID    a pending job never runs (cancelled at once); a running one is told to "
    "stop within\n               about a second (its handler is cancelled at its next await) "
    "and ends cancelled,\n               never retried. A plain-def handler runs on in its "
    "thread; its job still ends cancelled\n"
    "  retry ID     a dead job runs now with a fresh set of attempts; a delayed one (a delay, "
    "a retry's\n               backoff) is due now, its attempts kept\n\n"
    "PostgreSQL answers each of these from the jobs table, by id through its primary key.\n\n"
    "RabbitMQ cannot look a message up by id without taking it from the queue, so jobq does "
    "not read\nthe work queue: `show` and `retry` find dead jobs only (reading <queue>.dead, "
    "one message at a\ntime, all put back: a cost in proportion to the dead letters), and "
    "`list` lists dead jobs only.\nA pending, delayed or running job is not found, and "
    "RabbitMQ keeps nothing of a finished one.\n`cancel` works on any job all the same: it "
    "leaves a tombstone in <queue>.cancelled that every\nconsumer reads each second; a job it "
    "names is settled as cancelled unrun when it is received,\nor stopped if it is running. A "
    "tombstone lasts 7 days. Cancelling a dead job is refused (purge it).")


def _jobs_parser(sub: Any) -> None:
    from jobq.core.port import JOB_STATES

    jobs = sub.add_parser("jobs", help="show, list, cancel or retry single jobs",
                          description=JOBS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="Exit codes: 0 done; 2 an unknown id, or a job in a state the "
                                 "action does not apply to (nothing changed); 3 server unreachable.")
    _common(jobs)
    jobs.add_argument("action", choices=("show", "list", "cancel", "retry"))
    jobs.add_argument("id", nargs="?", help="the job's id (show, cancel, retry; on RabbitMQ the "
                                            "message_id)")
    jobs.add_argument("--state", choices=JOB_STATES, default="pending",
                      help="list: jobs in this state (default pending)")
    jobs.add_argument("--kind", dest="job_kind", help="list: only jobs of this kind")
    jobs.add_argument("--limit", type=int, default=100, help="list: at most this many (default 100)")
    jobs.add_argument("--json", action="store_true")


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


def consumer_main(argv: Sequence[str] | None = None) -> int:
    """``consumer``: run the worker pool until SIGTERM (or, with --once, until drained)."""
    # Until the event loop takes the signals over, a SIGTERM means "nothing started yet: exit 0".
    signal.signal(signal.SIGTERM, _exit_quietly)
    args = consumer_parser().parse_args(argv)
    from jobq.cli.consume import consume
    from jobq.wiring.backstop import Backstop

    with Backstop(logging.getLogger("jobq")) as backstop:
        return run_command(lambda s: consume(s, stats_json=args.stats_json, backstop=backstop),
                           args, serves_queues=True)


def producer_main(argv: Sequence[str] | None = None) -> int:
    """``producer``: enqueue ``--count`` generated jobs."""
    args = producer_parser().parse_args(argv)
    from jobq.cli import commands

    return run_command(lambda s: commands.produce(s, args), args)


def admin_main(argv: Sequence[str] | None = None) -> int:
    """``jobq``: init, stats, pause, resume, jobs, dead, prune, schedules."""
    args = admin_parser().parse_args(argv)
    if args.command == "dead" and args.action != "list" and not (args.ids or args.dead_kind
                                                                 or args.all):
        print("jobq: config error: --id: say which dead jobs: --id N, --kind K or --all",
              file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "jobs" and (args.action == "list") == (args.id is not None):
        need = "takes no id (--state, --kind)" if args.action == "list" else "needs a job id"
        print(f"jobq: config error: id: jobs {args.action} {need}", file=sys.stderr)
        return EXIT_CONFIG
    from jobq.cli import commands

    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "move":
        if args.source == args.target or args.batch < 1:
            print("jobq: config error: " + ("--to: the other backend than --from"
                                           if args.source == args.target
                                           else "--batch: at least 1"), file=sys.stderr)
            return EXIT_CONFIG
        return run_command(lambda s: commands.move_jobs(s, args), args)
    if args.command == "relay":
        if args.batch < 1:
            print("jobq: config error: --batch: at least 1", file=sys.stderr)
            return EXIT_CONFIG
        return run_command(lambda s: commands.relay(s, args), args)
    return run_command(lambda s: commands.admin(s, args), args)


if __name__ == "__main__":
    sys.exit(consumer_main())
