"""What the fault suite needs from each backend, and what the backends share.

The runner (faults/suite.py) is the same for every transport; a backend (faults/postgres.py,
faults/rabbitmq.py) knows how to start its consumers, how to restart, crash (kill_server) and
start again (ensure_up) its server, how long before a crash its asynchronous commits may be
undone (crash_window), and how to read where every job ended (done, dead, or still queued)
from the backend's own state.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from jobq.api import connect_publisher
from jobq.cli.main import consumer_parser
from jobq.cli.running import OVERRIDES
from jobq.config import Settings, load_settings
from jobq.core.port import NewJob
from jobq.wiring.derived import pool_buffer_max, rmq_prefetch

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass(kw_only=True)
class Options:
    """How hard to shake one run (the CLI flags of faults/suite.py)."""

    jobs: int = 50_000
    consumers: int = 3
    concurrency: int = 16
    sleep_ms: float = 40.0
    fail_rate: float = 0.01
    kill_every: float = 3.0
    terminate_every: float = 2.5
    server_fault: str = "both"  # restart, crash, both (each once per run), none
    lease: float = 5.0
    rescue_interval: float | None = 1.0  # Postgres lease mode; None: the configured default
    timeout: float = 600.0
    keep: bool = False
    repeat: int = 1
    processor: tuple[str, ...] = ()  # -p/-a flags instead of the completion record's


@dataclass
class FinalState:
    """Where every job of the run ended, read from the backend after the consumers stopped."""

    done: set[str] = field(default_factory=set)
    dead: dict[str, str] = field(default_factory=dict)  # id -> reason
    unfinished: int = 0  # jobs neither done nor dead (still pending, running, queued)
    waiting: set[str] = field(default_factory=set)  # their ids: unfinished, not lost
    problems: list[str] = field(default_factory=list)  # the backend's counters disagree


@dataclass(frozen=True)
class Cut:
    """One round of cut connections: how many, and how many distinct consumers they served."""

    connections: int = 0
    consumers: int = 0


class Backend(Protocol):
    """One transport under test."""

    name: str

    def setup(self) -> None: ...

    def consumer_command(self, record_dir: Path, options: Options, index: int
                         ) -> tuple[list[str], dict[str, str]]: ...

    async def enqueue(self, count: int) -> list[str]: ...

    def remaining(self) -> int | None: ...

    def restart_server(self) -> None: ...

    def kill_server(self) -> None: ...

    def crash_window(self) -> float: ...

    def disrupt(self, pids: set[int]) -> Cut: ...

    def final_state(self, accepted: list[str]) -> FinalState: ...

    def ensure_up(self) -> None: ...

    def cleanup(self) -> None: ...


def tcp_up(host: str, port: int) -> bool:
    """True when something accepts connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def wait_tcp(host: str, port: int, timeout: float) -> bool:
    """Wait until host:port accepts connections."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tcp_up(host, port):
            return True
        time.sleep(0.2)
    return False


def base_env(**extra: str) -> dict[str, str]:
    """The environment of a consumer: no stray JOBQ_* settings, tests importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    # This checkout's jobq first, ahead of the editable install's: a suite run from another
    # worktree (with this venv) runs that worktree's code, whatever is edited here meanwhile.
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
    env.update(extra)
    return env


def consumer_settings(argv: list[str], env: dict[str, str]) -> Settings:
    """The settings a consumer started with ``argv`` and ``env`` runs with, read as jobq.cli.main does."""
    args = consumer_parser().parse_args(argv[1:])
    overrides = {key: getattr(args, dest) for dest, key in OVERRIDES.items()
                 if getattr(args, dest, None) is not None and getattr(args, dest) is not False}
    return load_settings(args.config, overrides, env=env)


def capacity(settings: Settings) -> int:
    """What one consumer can hold at once: the RabbitMQ prefetch, else concurrency + buffer
    (in lease mode with the buffer left to jobq, as far as jobq may grow it: sizing.py)."""
    if settings.transport == "rabbitmq":
        return rmq_prefetch(settings)
    return settings.consumer.concurrency + max(settings.consumer.buffer_size, pool_buffer_max(settings))


def record_args(record_dir: Path, options: Options) -> list[str]:
    """Consumer flags for the independent completion record (tests.processors:record), or for
    ``options.processor`` when it names another."""
    work = list(options.processor) or [
        "-p", "tests.processors:record", "-a", f"directory={record_dir}",
        "-a", f"sleep_ms={options.sleep_ms}", "-a", f"fail_rate={options.fail_rate}"]
    return [*work, "-n", str(options.concurrency), "--shutdown-timeout", "15",
            "--log-level", "warning"]


async def enqueue_numbered(settings: Settings, count: int) -> list[str]:
    """Enqueue jobs numbered 0..count-1 through the Python API; the ids it returned are the record."""
    ids: list[str] = []
    async with connect_publisher(settings) as publisher:
        for start in range(0, count, 5000):
            batch = [NewJob(kind="chaos", payload={"n": n}) for n in range(start, min(count, start + 5000))]
            ids.extend(await publisher.enqueue_many(batch))
    return ids


