"""What the fault suite needs from each backend: set-up, enqueue, faults, and the final state.

The runner (benchmarks/chaos.py) is the same for every transport; a backend knows how to start
its consumers, how to restart its server, and how to read which jobs ended dead.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psycopg
from psycopg import conninfo, sql

from jobq.api import connect_publisher
from jobq.config import Settings, load_settings
from jobq.transport import NewJob

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
AVAILABLE = ("postgres-lease", "postgres-transaction", "rabbitmq-quorum", "rabbitmq-classic")
TXN_CONCURRENCY = 8  # transaction mode holds a connection per running job: 3 x (8 + 2) of 100
PG_DSN = os.environ.get("JOBQ_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass(kw_only=True)
class Options:
    """How hard to shake one run (the CLI flags of benchmarks/chaos.py)."""

    jobs: int = 50_000
    consumers: int = 3
    concurrency: int = 16
    sleep_ms: float = 40.0
    fail_rate: float = 0.01
    kill_every: float = 3.0
    terminate_every: float = 2.5
    restart: bool = True
    lease: float = 5.0
    timeout: float = 600.0
    keep: bool = False


@dataclass
class FinalState:
    """Where every job of the run ended, read from the backend after the consumers stopped."""

    done: set[str] = field(default_factory=set)
    dead: dict[str, str] = field(default_factory=dict)  # id -> reason
    unfinished: int = 0  # jobs neither done nor dead (still pending, running, queued)


class Backend(Protocol):
    """One transport under test."""

    name: str

    def setup(self) -> None: ...

    def consumer_command(self, record_dir: Path, options: Options) -> tuple[list[str], dict[str, str]]: ...

    async def enqueue(self, count: int) -> list[str]: ...

    def remaining(self) -> int | None: ...

    def restart_server(self) -> None: ...

    def disrupt(self) -> int: ...

    def final_state(self) -> FinalState: ...

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
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def record_args(record_dir: Path, options: Options) -> list[str]:
    """Consumer flags for the independent completion record (tests.processors:record)."""
    return ["-p", "tests.processors:record", "-a", f"directory={record_dir}",
            "-a", f"sleep_ms={options.sleep_ms}", "-a", f"fail_rate={options.fail_rate}",
            "-n", str(options.concurrency), "--shutdown-timeout", "15", "--log-level", "warning"]


async def enqueue_numbered(settings: Settings, count: int) -> list[str]:
    """Enqueue jobs numbered 0..count-1 through the Python API; the ids it returned are the record."""
    ids: list[str] = []
    async with connect_publisher(settings) as publisher:
        for start in range(0, count, 5000):
            batch = [NewJob(kind="chaos", payload={"n": n}) for n in range(start, min(count, start + 5000))]
            ids.extend(await publisher.enqueue_many(batch))
    return ids


class PostgresBackend:
    """Postgres lease (or transaction) mode on a fresh schema."""

    def __init__(self, claim: str = "lease", dsn: str = PG_DSN) -> None:
        self.name = f"postgres-{claim}"
        self.claim = claim
        self.dsn = dsn
        tag = uuid.uuid4().hex[:8]
        self.schema = f"chaos_{tag}"
        self.queue = "chaos"
        self.app = f"jobq-chaos-{tag}"  # application_name marks our consumers' backends
        info = conninfo.conninfo_to_dict(dsn)
        self.host, self.port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)

    def _config(self) -> list[str]:
        return ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", self.queue]

    def _env(self, options: Options | None = None) -> dict[str, str]:
        lease = options.lease if options else 60.0
        return base_env(
            JOBQ_PG_DSN=conninfo.make_conninfo(self.dsn, application_name=self.app),
            JOBQ_POSTGRES__SCHEMA=self.schema, JOBQ_POSTGRES__CLAIM=self.claim,
            JOBQ_POSTGRES__LEASE=str(lease), JOBQ_POSTGRES__RESCUE_INTERVAL="1",
            JOBQ_CONNECT__ATTEMPTS="40", JOBQ_CONNECT__BACKOFF_BASE="0.2",
            JOBQ_CONNECT__BACKOFF_MAX="2")

    def setup(self) -> None:
        """Create the schema with `jobq init`."""
        done = subprocess.run([str(BIN / "jobq"), "init", *self._config()], env=self._env(),
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"jobq init failed: {done.stderr}")

    def consumer_command(self, record_dir: Path, options: Options) -> tuple[list[str], dict[str, str]]:
        """The consumer command line and environment."""
        if self.claim == "transaction":  # the shared server allows 100 connections in all
            options = dataclasses.replace(options, concurrency=min(options.concurrency, TXN_CONCURRENCY))
        return ([str(BIN / "consumer"), *self._config(), *record_args(record_dir, options)],
                self._env(options))

    async def enqueue(self, count: int) -> list[str]:
        """Enqueue ``count`` jobs through the Python API; the ids it returned are the record."""
        settings = load_settings(ROOT / "configs" / "postgres.yaml", {
            "postgres.dsn": self.dsn, "postgres.schema": self.schema, "queue": self.queue,
            "log.level": "warning"}, env={})
        return await enqueue_numbered(settings, count)

    def _query(self, query: sql.Composed | sql.SQL, params: tuple[object, ...] = ()
               ) -> list[tuple[object, ...]]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
            return conn.execute(query, params).fetchall()

    def _count(self, query: sql.Composed | sql.SQL, params: tuple[object, ...] = ()) -> int:
        value = self._query(query, params)[0][0]
        assert isinstance(value, int)
        return value

    def _jobs(self) -> sql.Identifier:
        return sql.Identifier(self.schema, "jobs")

    def remaining(self) -> int | None:
        """Jobs not yet done or dead; None while the server does not answer."""
        try:
            return self._count(sql.SQL(
                "SELECT count(*) FROM {} WHERE status IN ('pending', 'running')").format(self._jobs()))
        except psycopg.Error:
            return None

    def restart_server(self) -> None:
        """`pg_ctlcluster ... restart`: every backend of the server goes."""
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                       check=True, capture_output=True, timeout=120)
        wait_tcp(self.host, self.port, 60)

    def disrupt(self) -> int:
        """pg_terminate_backend on every backend of our consumers; how many were cut."""
        try:
            return self._count(sql.SQL(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()"), (self.app,))
        except psycopg.Error:
            return 0

    def final_state(self) -> FinalState:
        """Status of every job of the queue."""
        state = FinalState()
        rows = self._query(sql.SQL("SELECT id::text, status, last_error FROM {}").format(self._jobs()))
        for job_id, status, error in rows:
            if status == "done":
                state.done.add(str(job_id))
            elif status == "dead":
                state.dead[str(job_id)] = str(error)
            else:
                state.unfinished += 1
        return state

    def ensure_up(self) -> None:
        """Start the server again if a restart left it down."""
        if wait_tcp(self.host, self.port, 10):
            return
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"],
                       capture_output=True, timeout=120)
        wait_tcp(self.host, self.port, 60)

    def cleanup(self) -> None:
        """Drop the run's schema."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))


def make_backend(name: str) -> Backend:
    """The backend called ``name`` (postgres-lease, postgres-transaction, ...)."""
    if name == "postgres-lease":
        return PostgresBackend("lease")
    if name == "postgres-transaction":
        return PostgresBackend("transaction")
    if name in ("rabbitmq-quorum", "rabbitmq-classic"):
        from benchmarks.chaos_rabbit import RabbitBackend  # it builds on this module

        return RabbitBackend(name.removeprefix("rabbitmq-"))
    raise SystemExit(f"chaos: unknown transport {name!r}")
