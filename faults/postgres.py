"""The fault suite's Postgres backend: lease or transaction mode on a schema of its own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import uuid
from pathlib import Path

import psycopg
from psycopg import conninfo, sql

from faults import servers
from faults.backend import (
    BIN,
    ROOT,
    Cut,
    FinalState,
    Options,
    base_env,
    enqueue_numbered,
    record_args,
    wait_tcp,
)
from jobq.config import load_settings

TXN_CONCURRENCY = 8  # transaction mode holds a connection per running job: 3 x (8 + 2) of 100
PG_DSN = os.environ.get("JOBQ_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# An ack flush slower than ack_interval (a loaded server): its jobs were recorded that much
# earlier than their acks committed, so the crash window reaches back that much further.
ACK_SLACK_S = 0.5


class PostgresBackend:
    """Postgres lease (or transaction) mode on a fresh schema."""

    def __init__(self, claim: str = "lease", dsn: str = PG_DSN) -> None:
        self.name = f"postgres-{claim}"
        self.claim = claim
        self.dsn = dsn
        tag = uuid.uuid4().hex[:8]
        self.schema = f"chaos_{tag}"
        self.queue = "chaos"
        # application_name marks our consumers' backends, and (by its suffix) which consumer.
        self.app = f"jobq-chaos-{tag}"
        info = conninfo.conninfo_to_dict(dsn)
        self.host, self.port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)

    def _config(self) -> list[str]:
        return ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", self.queue]

    def _env(self, options: Options | None = None, index: int = 0) -> dict[str, str]:
        lease = options.lease if options else 60.0
        rescue = options.rescue_interval if options else 1.0
        return base_env(
            JOBQ_PG_DSN=conninfo.make_conninfo(self.dsn, application_name=f"{self.app}-c{index}"),
            JOBQ_POSTGRES__SCHEMA=self.schema, JOBQ_POSTGRES__CLAIM=self.claim,
            JOBQ_POSTGRES__LEASE=str(lease), JOBQ_CONNECT__ATTEMPTS="40",
            JOBQ_CONNECT__BACKOFF_BASE="0.2", JOBQ_CONNECT__BACKOFF_MAX="2",
            **({} if rescue is None else {"JOBQ_POSTGRES__RESCUE_INTERVAL": f"{rescue:g}"}))

    def setup(self) -> None:
        """Create the schema with `jobq init`."""
        done = subprocess.run([str(BIN / "jobq"), "init", *self._config()], env=self._env(),
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"jobq init failed: {done.stderr}")

    def consumer_command(self, record_dir: Path, options: Options, index: int
                         ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of consumer number ``index``."""
        if self.claim == "transaction":  # the shared server allows 100 connections in all
            options = dataclasses.replace(options, concurrency=min(options.concurrency, TXN_CONCURRENCY))
        return ([str(BIN / "consumer"), *self._config(), *record_args(record_dir, options)],
                self._env(options, index))

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

    def disrupt(self, pids: set[int]) -> Cut:
        """pg_terminate_backend on every backend of our consumers (``pids``: not needed here)."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
                return self.cut_through(conn)
        except psycopg.Error:  # the server is restarting: nothing to cut this round
            return Cut()

    def cut_through(self, conn: psycopg.Connection[tuple[object, ...]]) -> Cut:
        """pg_terminate_backend on every backend of our consumers, through ``conn``."""
        # Materialized, so that pg_terminate_backend only ever sees our backends: in one
        # WHERE the planner may evaluate it before the name test.
        rows = conn.execute(sql.SQL(
            "WITH ours AS MATERIALIZED (SELECT pid, application_name FROM pg_stat_activity "
            "  WHERE starts_with(application_name, %s) AND pid <> pg_backend_pid()), "
            "cut AS MATERIALIZED (SELECT application_name, pg_terminate_backend(pid) AS ok "
            "  FROM ours) "
            "SELECT count(*), count(DISTINCT application_name) FROM cut WHERE ok"),
            (f"{self.app}-",)).fetchall()
        cut, consumers = rows[0]
        assert isinstance(cut, int) and isinstance(consumers, int)
        return Cut(cut, consumers)

    def final_state(self, accepted: list[str]) -> FinalState:
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
                if status in ("pending", "running"):  # cancelled is an end, not a wait
                    state.waiting.add(str(job_id))
        return state

    def kill_server(self) -> None:
        """`pg_ctlcluster ... stop -m immediate`: a crash (ensure_up starts it again)."""
        servers.crash_postgres(self.host, self.port)

    def crash_window(self) -> float:
        """Seconds before a crash whose completions it may undo (faults/verdict.py).

        Lease mode's claims and acks commit asynchronously: 3 x wal_writer_delay (the WAL
        writer's longest wait), + the ack flush interval, + slack. Transaction mode ends each
        job with a synchronous commit: 0.
        """
        if self.claim == "transaction":
            return 0.0
        try:
            delay_ms = self._count(sql.SQL(
                "SELECT setting::int FROM pg_settings WHERE name = 'wal_writer_delay'"))
        except psycopg.Error as exc:
            raise RuntimeError(f"cannot read wal_writer_delay: {exc}") from exc
        ack = load_settings(ROOT / "configs" / "postgres.yaml", env={}).postgres.ack_interval
        return 3 * delay_ms / 1000 + ack + ACK_SLACK_S

    def ensure_up(self) -> None:
        """Start the server if it does not answer; ServerDown if it does not come back."""
        servers.start_postgres(self.host, self.port)

    def cleanup(self) -> None:
        """Drop the run's schema."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
