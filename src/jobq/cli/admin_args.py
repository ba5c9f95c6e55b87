"""The ``jobq`` admin command line: every command's options, help and exit codes (parsing
only; cli/main.py runs them)."""

from __future__ import annotations

import argparse
from typing import Any

from jobq.cli import values


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML config file (default: $JOBQ_CONFIG)")
    parser.add_argument("--transport", "-t", choices=("postgres", "rabbitmq"),
                        help="the backend (default: the config's transport, postgres)")
    parser.add_argument("--queue", "-q", help="the queue (default: the config's queue, default)")
    parser.add_argument("--log-format", choices=("text", "json"), help=LOG_FORMAT)
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help=LOG_LEVEL)


LOG_FORMAT = "log lines as text or one JSON object each (default: log.format, text)"
LOG_LEVEL = "the lowest level logged (default: log.level; admin commands: warning, info with -v)"
JSON = "print the answer as one JSON document, for scripts"


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


ALIASES = {"consume": "run a worker pool: the consumer command (jobq consume --help)",
           "enqueue": "enqueue generated jobs: the producer command (jobq enqueue --help)"}
SERVING = ("dashboard", "relay")  # commands that run until stopped: they log at the config's level


class _Intermixed(argparse.ArgumentParser):
    """A command's parser that takes its options anywhere among its positionals:
    ``jobq jobs show -q mail 42`` as ``jobq jobs show 42 -q mail`` (argparse's intermixed
    parsing, which a parser with subcommands cannot use: so each command's own parser)."""

    _mixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._mixing:  # parse_known_intermixed_args calls back here, twice
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def admin_parser() -> argparse.ArgumentParser:
    """The ``jobq`` admin argument parser."""
    from jobq import __version__

    p = argparse.ArgumentParser(prog="jobq", description="jobq: run, feed and administer job "
                                "queues on PostgreSQL or RabbitMQ.")
    p.add_argument("--version", action="version", version=f"jobq {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Intermixed)
    for name, text in ALIASES.items():  # dispatched before parsing (cli/main.admin_main)
        sub.add_parser(name, help=text, description=text, add_help=False)
    for add in (_reads, _dead_parser, _jobs_parser, _board_parser, _move_parser, _relay_parser,
                _prune_parser, _schedules_parser, _completion_parser):
        add(sub)
    for name, command in sub.choices.items():
        if name not in SERVING and name not in ALIASES and name != "completion":
            command.add_argument("-v", "--verbose", action="store_true",
                                 help="log at INFO (what it connects to); else warnings only")
    return p


def _completion_parser(sub: Any) -> None:
    """jobq completion."""
    text = ("print the shell completion of jobq, consumer and producer: eval \"$(jobq completion "
            "bash)\" in ~/.bashrc, or zsh (after compinit) in ~/.zshrc")
    completion = sub.add_parser("completion", help=text, description=text[0].upper() + text[1:]
                                + ". It is made from the commands' own options, so it matches "
                                "the installed jobq; run it again after an upgrade.")
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"), help="your shell")


def _reads(sub: Any) -> None:
    """init, stats, pause and resume."""
    init = sub.add_parser("init", help="create or upgrade the schema / topology", description=(
        "Create or upgrade what the queue needs on its backend: on PostgreSQL the schema's "
        "tables and indexes (migrations, each applied once, in order; --print-sql shows them), "
        "on RabbitMQ the exchange, the queue, its dead-letter and retry queues. Run it once per "
        "database or queue, and again after an upgrade of jobq; running it twice changes "
        "nothing."))
    common_options(init)
    init.add_argument("--print-sql", action="store_true", help="print the migrations, run none")
    stats = sub.add_parser("stats", help="queue depth by state, and whether it is paused",
                           description="The queue's jobs by state as its backend counts them, "
                                       "the longest wait of a job that is due, and whether the "
                                       "queue is paused.")
    common_options(stats)
    stats.add_argument("--json", action="store_true", help=JSON)
    for name, text in PAUSE_HELP.items():
        common_options(sub.add_parser(name, help=text[0], description=text[1]))


def _dead_parser(sub: Any) -> None:
    """jobq dead."""
    dead = sub.add_parser("dead", help="dead-letter management", description=(
        "The queue's dead jobs (attempts used up, or failed with PermanentError): list them "
        "with their last error, requeue them with a fresh set of attempts, or purge them. "
        "Name them with --id, --kind or --all."))
    common_options(dead)
    dead.add_argument("action", choices=("list", "requeue", "purge"),
                      help="list the dead jobs, requeue them (a fresh set of attempts), or "
                           "purge them (deleted)")
    dead.add_argument("--id", action="append", dest="ids",
                      help="a job id (repeatable; on RabbitMQ the message_id, any text)")
    dead.add_argument("--kind", dest="dead_kind", help="every dead job of this kind")
    dead.add_argument("--all", action="store_true", help="every dead job of the queue")
    dead.add_argument("--limit", type=int, default=100, help="list: at most this many (default 100)")
    dead.add_argument("--json", action="store_true", help=JSON)


def _board_parser(sub: Any) -> None:
    """jobq dashboard."""
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
    board.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help=LOG_LEVEL)


def _move_parser(sub: Any) -> None:
    """jobq move."""
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
    common_options(move)
    move.add_argument("--from", dest="source", required=True, choices=("postgres", "rabbitmq"),
                      help="the backend the jobs leave")
    move.add_argument("--to", dest="target", required=True, choices=("postgres", "rabbitmq"),
                      help="the backend they go to")
    move.add_argument("--state", choices=("pending", "dead"), default="pending",
                      help="which jobs (default pending: due and delayed; never running ones)")
    move.add_argument("--kind", dest="move_kind", help="only jobs of this kind")
    move.add_argument("--batch", type=int, default=500, help="jobs per batch (default 500)")


def _relay_parser(sub: Any) -> None:
    """jobq relay."""
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
    common_options(relay)
    relay.add_argument("--batch", type=int, default=500, help="jobs per transaction (default 500)")
    relay.add_argument("--once", action="store_true",
                       help="relay what is pending now, then exit")


def _prune_parser(sub: Any) -> None:
    """jobq prune."""
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
    common_options(prune)
    prune.add_argument("--older-than", type=values.duration, metavar="D",
                       help="delete jobs that ended more than D ago (default: "
                            "postgres.retention.<state>; required on RabbitMQ)")
    prune.add_argument("--state", choices=("done", "dead"),
                       help="only this state (default: PostgreSQL both, or with no --older-than "
                            "those with a retention; RabbitMQ dead, the only one it keeps)")


def _schedules_parser(sub: Any) -> None:
    """jobq schedules."""
    schedules = sub.add_parser(
        "schedules", help="the periodic schedules of the config, their last tick and next run",
        description="List the config's schedules: what each enqueues, the last tick fired (as "
                    "the backend records it) and the next run. Consumers fire the ticks.")
    common_options(schedules)
    schedules.add_argument("--json", action="store_true", help=JSON)


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
                          epilog="Exit codes: 0 done; 1 no job with that id; 2 not a job id, or a "
                                 "job in a state the action does not apply to (nothing changed); "
                                 "3 server unreachable.")
    common_options(jobs)
    jobs.add_argument("action", choices=("show", "list", "cancel", "retry"),
                      help="show one job, list jobs in a state, cancel one (it never runs, or "
                           "is stopped), retry one now (a dead or delayed job)")
    jobs.add_argument("id", nargs="?", help="the job's id (show, cancel, retry; on RabbitMQ the "
                                            "message_id)")
    jobs.add_argument("--state", choices=JOB_STATES, default="pending",
                      help="list: jobs in this state (default pending)")
    jobs.add_argument("--kind", dest="job_kind", help="list: only jobs of this kind")
    jobs.add_argument("--limit", type=int, default=100, help="list: at most this many (default 100)")
    jobs.add_argument("--json", action="store_true", help=JSON)
