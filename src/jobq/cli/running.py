"""Running a command: its settings from the command line, its errors as one line and an exit
code (the table in cli/main.py's docstring)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from jobq.cli.loops import loop_factory
from jobq.core.errors import (
    ConfigError,
    HookFailed,
    MalformedJob,
    NoSuchJob,
    QueueFull,
    Refused,
    TransportError,
)

if TYPE_CHECKING:
    from jobq.config import Settings

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_UNREACHABLE, EXIT_FORCED = 0, 1, 2, 3, 130
EXIT_QUEUE_FULL = 4

OVERRIDES = {  # argparse dest -> config key
    "transport": "transport", "queue": "queue", "log_format": "log.format",
    "log_level": "log.level", "concurrency": "consumer.concurrency",
    "processor": "consumer.processor", "app": "consumer.app", "once": "consumer.once",
    "claim": "postgres.claim", "job_timeout": "consumer.job_timeout",
    "shutdown_timeout": "consumer.shutdown_timeout", "metrics_port": "metrics.port",
    "max_attempts": "retry.max_attempts", "queues": "consumer.queues",
}


def settings_of(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
    """The settings a parsed command line asks for: its config file, then ``env``'s JOBQ_*
    keys (the process environment's by default), then its own options."""
    # ``is`` tests, not ``in (None, False)``: 0 == False, and --metrics-port 0 means "any port".
    overrides = {key: getattr(args, dest) for dest, key in OVERRIDES.items()
                 if getattr(args, dest, None) is not None and getattr(args, dest) is not False}
    if getattr(args, "processor_arg", None):
        overrides["consumer.processor_args"] = dict(args.processor_arg)
    if getattr(args, "metrics_port", None) is not None:
        overrides["metrics.enabled"] = True
    from jobq.config import load_settings

    settings = load_settings(args.config, overrides, env)
    if settings.transport == "memory":
        raise ConfigError("transport 'memory' keeps jobs inside one Python process (tests: "
                          "jobq.testing), where no command can reach them: use postgres or "
                          "rabbitmq", key="transport")
    return settings


def run_command(main: Callable[[Settings], Coroutine[Any, Any, int]], args: argparse.Namespace,
                *, serves_queues: bool = False, log_level: str | None = None) -> int:
    """Load settings, run ``main``, map errors to one line on stderr and an exit code.
    ``serves_queues``: a consumer, whose JSON log lines name every queue it serves;
    ``log_level``: the command's own level (an admin command's: warning, or info with -v),
    unless --log-level says otherwise (the config's log.level is the consumer's; it is
    still checked)."""
    from jobq.observability.logs import configure

    try:
        settings = settings_of(args)
        queues = ",".join(settings.consumer.queues) if serves_queues else ""
        own = log_level if getattr(args, "log_level", None) is None else None
        level = own or settings.log.level
        configure(level, settings.log.format, transport=settings.transport,
                  queue=queues or settings.queue)
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            return runner.run(main(settings))
    except NoSuchJob as exc:  # an answer, not a mistake in the command: scripts test for it
        print(f"jobq: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ConfigError as exc:
        print(f"jobq: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except Refused as exc:  # a ConnectionLost, but the server answered: a mistake
        print(f"jobq: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except TransportError as exc:
        print(f"jobq: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MalformedJob as exc:
        print(f"jobq: job refused: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except QueueFull as exc:
        print(f"jobq: {exc} ({len(exc.accepted)} of this batch were enqueued)", file=sys.stderr)
        return EXIT_QUEUE_FULL
    except HookFailed as exc:  # the hook's traceback was logged where it failed
        print(f"jobq: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ModuleNotFoundError as exc:  # a backend's driver not installed: say which extra
        from jobq.wiring.lazy import missing_extra

        said = missing_extra(exc)
        if said is None:
            raise
        print(f"jobq: config error: {said}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_FORCED
