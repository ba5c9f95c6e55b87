"""A PostgreSQL primary and its streaming standby, of the harness's own, beside the machine's server.

The primary is a fresh ``initdb`` (trust auth, loopback only, 127.0.0.1:5441 by default); the
standby is ``pg_basebackup -R -X stream`` of it with a replication slot, on the next port. Both
run as the ``postgres`` user from one temporary directory, with the installed server's binaries
(the newest under /usr/lib/postgresql), and autovacuum left on (the default of a new cluster,
unlike the machine's CI server). The machine's own cluster is never touched.

A failover is ``stop -m immediate`` of the primary (a crash: no shutdown checkpoint, and WAL
the standby had not yet received is gone with it), then ``pg_ctl promote`` of the standby.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import psycopg

from faults.backend import tcp_up
from faults.cluster.nodes import as_user, chown_tree
from faults.servers import PG_ETC, ServerDown, command, pg_ready, said, wait_until

USER = "postgres"
READY_S = 60.0
SLOT = "jobq_standby"


def bindir() -> Path:
    """The newest installed PostgreSQL's binaries."""
    return Path("/usr/lib/postgresql") / sorted(PG_ETC.iterdir())[-1].name / "bin"


class PostgresPair:
    """A primary streaming to a standby; ``stop`` leaves nothing behind."""

    def __init__(self, first_port: int = 5441) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jobq-cluster-pg-"))
        self.primary_port, self.standby_port = first_port, first_port + 1
        self.primary_dir, self.standby_dir = self.dir / "primary", self.dir / "standby"
        self.bin = bindir()

    def dsn(self, port: int) -> str:
        """One server's DSN."""
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @property
    def failover_dsn(self) -> str:
        """Both servers, the writable one chosen by libpq (what the consumers are given)."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:"
                f"{self.standby_port}/postgres?target_session_attrs=read-write")

    def _run(self, *argv: str, timeout: float = 120) -> None:
        done = command(*as_user(USER, *argv), timeout=timeout)
        if done.returncode != 0:
            raise ServerDown(said(done))

    def _ctl(self, data: Path, *args: str) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"),
                  "-w", "-t", str(int(READY_S)), *args)

    def start(self, *, standby: bool = True, conf: str = "") -> None:
        """initdb and start the primary (``conf`` appended to its postgresql.conf), clone the
        standby from it and wait for streaming (``standby=False``: the primary alone)."""
        taken = [p for p in (self.primary_port, self.standby_port) if tcp_up("127.0.0.1", p)]
        if taken:
            raise ServerDown(f"the pair's ports are taken: {taken} (another harness still "
                             f"running? pick others with --pg-port)")
        chown_tree(self.dir, USER)
        self._run(str(self.bin / "initdb"), "-D", str(self.primary_dir), "-U", USER,
                  "--auth=trust", "--no-locale", "-E", "UTF8")
        with (self.primary_dir / "postgresql.conf").open("a") as out:
            out.write("listen_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.dir}'\n"
                       "max_connections = 100\n" + conf)
        self._ctl(self.primary_dir, "-o", f"-p {self.primary_port}", "start")
        if not standby:
            return
        self._run(str(self.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary_port),
                  "-U", USER, "-D", str(self.standby_dir), "-R", "-X", "stream", "-C", "-S", SLOT)
        self._ctl(self.standby_dir, "-o", f"-p {self.standby_port}", "start")
        wait_until(lambda: pg_ready("127.0.0.1", self.standby_port), READY_S,
                   f"the standby on 127.0.0.1:{self.standby_port} did not answer")
        wait_until(self.streaming, READY_S, "the standby did not start streaming from the primary")

    def streaming(self) -> bool:
        """True when the primary streams WAL to the standby."""
        try:
            with psycopg.connect(self.dsn(self.primary_port), connect_timeout=3) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_replication "
                                   "WHERE state = 'streaming'").fetchone()
        except psycopg.Error:
            return False
        return bool(row and row[0])

    def in_recovery(self, port: int) -> bool:
        """True while the server on ``port`` is a standby."""
        with psycopg.connect(self.dsn(port), connect_timeout=3) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def crash_primary(self) -> None:
        """``pg_ctl stop -m immediate`` of the primary; RuntimeError if it still answers."""
        self._ctl(self.primary_dir, "-m", "immediate", "stop")
        if pg_ready("127.0.0.1", self.primary_port):
            raise RuntimeError(f"the primary on 127.0.0.1:{self.primary_port} still answers")

    def promote(self) -> float:
        """Promote the standby; the seconds until it takes writes."""
        started = time.monotonic()
        self._ctl(self.standby_dir, "promote")
        wait_until(lambda: not self.in_recovery(self.standby_port), READY_S,
                   "the promoted standby still in recovery")
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop both servers (immediately) and delete their files."""
        for data in (self.primary_dir, self.standby_dir):
            if (data / "postmaster.pid").exists():
                command(*as_user(USER, str(self.bin / "pg_ctl"), "-D", str(data), "-m",
                                 "immediate", "-w", "stop"), timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
