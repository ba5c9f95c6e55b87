"""Clean, uniquely named places to run one case in, per backend, and the servers' processes.

A Space is a fresh Postgres schema or a fresh set of RabbitMQ queues (uuid-suffixed names):
no case sees another's jobs, and teardown removes only what the space created, since other
people use the same servers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONFIGS = ROOT / "configs"


@dataclass(frozen=True, kw_only=True)
class Servers:
    """Where the servers are (the same values the jobq configs read from the environment)."""

    pg_dsn: str = "postgresql://postgres@127.0.0.1:5432/test"
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"

    @classmethod
    def from_env(cls) -> Servers:
        """JOBQ_PG_DSN / JOBQ_AMQP_URL if set, else the local defaults."""
        return cls(pg_dsn=os.environ.get("JOBQ_PG_DSN", cls.pg_dsn),
                   amqp_url=os.environ.get("JOBQ_AMQP_URL", cls.amqp_url))


class Space(Protocol):
    """One case's private queue on one backend."""

    backend: str
    queue: str
    config: Path
    env: dict[str, str]  # what every process of the case gets (JOBQ_* overrides, app name)

    def create(self) -> None:
        """Create the schema / topology (runs the real ``jobq init``)."""

    def drop(self) -> None:
        """Remove everything create() made, and nothing else."""

    def server_pids(self) -> list[int]:
        """The server processes doing this case's work right now (for CPU accounting)."""

    def storage(self) -> dict[str, Any]:
        """What the server holds for this case's queue right now (sizes, dead tuples, memory)."""

    def server_waits(self) -> dict[str, int] | None:
        """How many of those processes are, right now, on CPU or waiting, by what they wait
        for (``cpu``, ``wal``, ``lock``, ``io``, ``client``, ``other``); None where the server
        cannot say."""


def base_env(servers: Servers) -> dict[str, str]:
    """The parent environment without JOBQ_* settings, plus the servers and our import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    env["JOBQ_PG_DSN"] = servers.pg_dsn
    env["JOBQ_AMQP_URL"] = servers.amqp_url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def jobq_init(space: Space) -> None:
    """``jobq init`` for the space's queue; raise with its stderr if it fails."""
    done = subprocess.run([str(BIN / "jobq"), "init", "--config", str(space.config), "--queue",
                           space.queue, "--log-level", "warning"], env=space.env,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"jobq init failed ({done.returncode}): {done.stderr.strip()}")


# What each backend of a case is doing, by class: "cpu" (running a statement, not waiting),
# "wal" (a commit waiting for the WAL to reach the disk: flushing it, or waiting for the
# backend that does), "lock" (a row or other heavyweight lock, or an LWLock: buffers, the WAL
# insert position), "io" (other disk reads and writes), "client" (waiting for its client: idle
# between round trips, or reading the next message), "other".
WAITS = """
SELECT CASE WHEN state = 'active' AND wait_event_type IS NULL THEN 'cpu'
            WHEN wait_event IN ('WALWrite', 'WALSync') THEN 'wal'
            WHEN wait_event_type IN ('Lock', 'LWLock') THEN 'lock'
            WHEN wait_event_type = 'IO' THEN 'io'
            WHEN wait_event_type = 'Client' OR state LIKE 'idle%%' THEN 'client'
            ELSE 'other' END, count(*)
  FROM pg_stat_activity WHERE application_name = %s GROUP BY 1
"""

# The jobs table of a case (the server's statistics: counts are as of each backend's last
# flush, within about a second of its transactions).
STORAGE = """
SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid), pg_total_relation_size(c.oid),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.last_autovacuum,
       current_setting('autovacuum')
  FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.oid = %s::regclass
"""


@dataclass
class PostgresSpace:
    """A fresh schema ``bench_<hex>``; backends are found by their application_name."""

    servers: Servers
    extra_env: dict[str, str] = field(default_factory=dict)
    backend: str = "postgres"
    queue: str = "bench"
    config: Path = CONFIGS / "postgres.yaml"

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.schema = f"bench_{tag}"
        self.app = f"jobq-bench-{tag}"
        self.env = {**base_env(self.servers), "JOBQ_POSTGRES__SCHEMA": self.schema,
                    "PGAPPNAME": self.app, **self.extra_env}
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def create(self) -> None:
        """Initialise the schema with the real ``jobq init``."""
        jobq_init(self)

    def drop(self) -> None:
        """Drop the schema (cascade: the jobs table, its function, the migrations table)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        with psycopg.connect(self.servers.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))

    def _monitor(self) -> psycopg.Connection[tuple[object, ...]]:
        """The connection that watches this case's backends (opened on first use)."""
        if self._conn is None:
            self._conn = psycopg.connect(self.servers.pg_dsn, autocommit=True,
                                         application_name="jobq-bench-monitor")
        return self._conn

    def server_pids(self) -> list[int]:
        """Backends serving this case's processes (they all connect with PGAPPNAME = app)."""
        rows = self._monitor().execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.app,)).fetchall()
        return [int(row[0]) for row in rows]  # type: ignore[call-overload]

    def storage(self) -> dict[str, Any]:
        """The jobs table as the server holds it: sizes, live and dead tuples, autovacuum."""
        table = sql.Identifier(self.schema, "jobs").as_string(None)
        row = self._monitor().execute(STORAGE, (table,)).fetchone()
        assert row is not None
        names = ("table_bytes", "indexes_bytes", "total_bytes", "live_tuples", "dead_tuples",
                 "autovacuum_runs", "last_autovacuum", "autovacuum_setting")
        return dict(zip(names, (str(v) if k == "last_autovacuum" and v else v
                                for k, v in zip(names, row, strict=True)), strict=True))

    def server_waits(self) -> dict[str, int] | None:
        """Backends of this case by wait class, from pg_stat_activity (see WAITS)."""
        rows = self._monitor().execute(WAITS, (self.app,)).fetchall()
        return {str(row[0]): int(row[1]) for row in rows}  # type: ignore[call-overload]

    def settled(self) -> dict[int, float]:
        """When each done job's outcome was written (its ``finished_at``: the ack's statement
        began then, and committed a moment later), by the payload's ``n``, in epoch seconds."""
        rows = self._monitor().execute(sql.SQL(
            "SELECT (payload->>'n')::bigint, extract(epoch FROM finished_at)::float8 FROM {} "
            "WHERE status = 'done'").format(sql.Identifier(self.schema, "jobs"))).fetchall()
        return {int(n): float(at) for n, at in rows}  # type: ignore[call-overload, arg-type]


def beam_pids() -> list[int]:
    """The RabbitMQ node's Erlang VM (``beam.smp``) on this machine, found in /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip().startswith("beam"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@dataclass
class RabbitSpace:
    """A fresh jobq queue ``bench-<hex>`` (work, dead and retry-tier queues, its DLX exchange).

    The shared direct exchange is left alone: other users' queues are bound to it.
    """

    servers: Servers
    extra_env: dict[str, str] = field(default_factory=dict)
    backend: str = "rabbitmq"
    config: Path = CONFIGS / "rabbitmq.yaml"

    def __post_init__(self) -> None:
        self.queue = f"bench-{uuid.uuid4().hex[:10]}"
        self.env = {**base_env(self.servers), **self.extra_env}

    def create(self) -> None:
        """Declare the topology with the real ``jobq init``."""
        jobq_init(self)

    def drop(self) -> None:
        """Delete the queues and the DLX exchange ``jobq init`` declared for this queue."""
        from jobq.config import load_settings
        from jobq.transports.rabbitmq.topology import Topology

        topology = Topology.configured(load_settings(self.config, env=self.env).rabbitmq, self.queue)

        async def delete() -> None:
            import aio_pika

            connection = await aio_pika.connect(self.servers.amqp_url)
            async with connection:
                channel = await connection.channel()
                for name in topology.queues():
                    await channel.queue_delete(name)
                await channel.exchange_delete(topology.dlx)

        asyncio.run(delete())

    def server_pids(self) -> list[int]:
        """The broker node (its CPU includes other users' traffic on a shared broker)."""
        return beam_pids()

    def storage(self) -> dict[str, Any]:
        """The work queue as the broker holds it: its messages (a passive declare: exact) and
        the memory of the queue's processes as ``rabbitmqctl list_queues`` reports it, in
        bytes (their heap, which the broker does not shrink at once after a drain)."""
        async def count() -> int:
            import aio_pika

            connection = await aio_pika.connect(self.servers.amqp_url)
            async with connection:
                channel = await connection.channel()
                queue = await channel.declare_queue(self.queue, passive=True)
                return int(queue.declaration_result.message_count or 0)

        out: dict[str, Any] = {"messages": asyncio.run(count())}
        try:
            done = subprocess.run(["rabbitmqctl", "list_queues", "-q", "--formatter", "json",
                                   "name", "memory"], capture_output=True, text=True, timeout=30)
            rows = json.loads(done.stdout or "[]")
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            return {**out, "error": f"rabbitmqctl list_queues: {exc}"}
        row: dict[str, Any] = next((r for r in rows if r.get("name") == self.queue), {})
        return {**out, "memory_bytes": row.get("memory")}

    def server_waits(self) -> dict[str, int] | None:
        """The broker does not say what its processes wait for."""
        return None


def peer_command(peer: str, command: str, space: Space, *args: str) -> None:
    """``python -m benchmarks.peers.<peer>_peer <command>`` for ``space``; raise if it fails."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.peers.{peer}_peer", command, *args],
                          env=space.env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} {command} failed ({done.returncode}): "
                           f"{done.stderr.strip()[-500:]}")


@dataclass
class PeerPostgresSpace(PostgresSpace):
    """A PostgreSQL peer's schema, made by the peer's own ``install`` (its tables, not jobq's)."""

    peer: str = ""

    def create(self) -> None:
        """The peer's schema, as the peer installs it."""
        peer_command(self.peer, "install", self, "--dsn", self.servers.pg_dsn,
                     "--schema", self.schema)

    def storage(self) -> dict[str, Any]:
        """Not read for peers (their tables are their own)."""
        return {}


@dataclass
class PeerRabbitSpace(RabbitSpace):
    """A RabbitMQ peer's queue, declared and deleted by the peer itself."""

    peer: str = ""

    def create(self) -> None:
        """The peer's queues, as the peer declares them."""
        peer_command(self.peer, "install", self, "--url", self.servers.amqp_url,
                     "--queue", self.queue)

    def drop(self) -> None:
        """The peer's queues deleted."""
        peer_command(self.peer, "drop", self, "--url", self.servers.amqp_url,
                     "--queue", self.queue)

    def storage(self) -> dict[str, Any]:
        """Not read for peers."""
        return {}
