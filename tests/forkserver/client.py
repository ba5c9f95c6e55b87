"""The fork server's client, in the test process: starts the server, asks it for commands,
and holds each as a ``subprocess.Popen``."""

from __future__ import annotations

import json
import os
import select
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.forkserver.wire import HEADER, READY_WITHIN, STARTUP, scripts


class ForkServer:
    """One test process's server, started at its first command."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = dict(env)
        self._names = set(scripts())
        self._path = ""  # the server's socket, in a directory of its own (which it removes)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def serves(self, name: str, env: Mapping[str, str]) -> bool:
        """True when ``name`` with ``env`` starts as the server would start it."""
        return name in self._names and all(env.get(k) == self._env.get(k) for k in STARTUP)

    def _started(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            directory = tempfile.mkdtemp(prefix="jobq-fork-")
            self._path = os.path.join(directory, "socket")
            log_path = os.path.join(directory, "server.log")
            with open(log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.forkserver.server", self._path], env=self._env,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
            assert self._proc.stdout is not None
            ready = selectors.DefaultSelector()
            ready.register(self._proc.stdout, selectors.EVENT_READ)
            if not ready.select(READY_WITHIN) or self._proc.stdout.readline() != b"ready\n":
                self._proc.kill()
                raise RuntimeError("the tests' fork server did not start:\n"
                                   + Path(log_path).read_text(errors="replace"))

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> Forked:
        """Run ``argv`` (its first item the script's path) as a child of the server."""
        self._started()
        stdin = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._path)
            data = json.dumps({"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}).encode()
            socket.send_fds(conn, [HEADER.pack(len(data))], [stdin, out_w, err_w])
            conn.sendall(data)
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        return Forked(list(argv), conn, out_r, err_r)


class Forked(subprocess.Popen[str]):
    """A command the server forked: what tests use of ``Popen`` (text pipes, ``poll``,
    ``wait``, ``communicate``, signals), its status from the server."""

    def __init__(self, args: list[str], conn: socket.socket, out: int, err: int) -> None:
        # Popen.__init__ would start a process: the attributes are set here instead.
        self.args = args
        self._name = args[0]
        self.stdin = None
        self.stdout = open(out, encoding=None)  # noqa: SIM115 (closed as Popen closes its own)
        self.stderr = open(err, encoding=None)  # noqa: SIM115
        self.returncode: Any = None
        self._conn = conn
        self._reply = b""
        self._status = threading.Lock()
        self._read: dict[str, list[str]] = {}
        self._readers: list[threading.Thread] = []
        line = self._line(READY_WITHIN) or ""
        if not line.startswith("pid "):
            raise RuntimeError(f"the tests' fork server did not start {self._name}: {line!r}")
        self.pid = int(line.split()[1])

    def poll(self) -> int | None:
        """The exit status, or None while the child runs."""
        return self._wait_status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once the child has ended; ``TimeoutExpired`` after ``timeout``."""
        status = self._wait_status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return status

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line about this child, or None if none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._reply:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(256)
            if not chunk:
                return ""  # the server has gone
            self._reply += chunk
        line, _, self._reply = self._reply.partition(b"\n")
        return line.decode()

    def _wait_status(self, timeout: float | None) -> int | None:
        with self._status:
            if self.returncode is None:
                line = self._line(timeout)
                if line is None:
                    return None
                if not line.startswith("exit "):
                    raise RuntimeError(f"the tests' fork server lost {self._name}: {line!r}")
                self.returncode = int(line.split()[1])
                self._conn.close()
            return int(self.returncode)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Everything the child wrote to stdout and stderr, once it has ended (None for a
        stream whose pipe another reader has taken, as ``Popen`` gives)."""
        if input is not None:
            raise ValueError("a forked command has no stdin to write to")
        if not self._readers:
            for name, stream in (("out", self.stdout), ("err", self.stderr)):
                if stream is None:
                    continue
                self._read[name] = []
                reader = threading.Thread(target=self._drain, args=(stream, self._read[name]),
                                          daemon=True)
                reader.start()
                self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = (self._read.get(name) for name in ("out", "err"))
        return (None if out is None else "".join(out)), (None if err is None else "".join(err))

    @staticmethod
    def _drain(stream: Any, into: list[str]) -> None:
        into.append(stream.read())
        stream.close()

    def send_signal(self, sig: int) -> None:
        """Signal the child, unless it has ended (its pid may be another's by then)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None and not self._readers:
                stream.close()
        self.wait()

    def __del__(self) -> None:
        pass  # Popen's would look for the process it never started


def run(server: ForkServer | None, argv: Sequence[str], env: Mapping[str, str],
        timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)``,
    through ``server`` when it can start the command."""
    proc = popen(server, argv, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def popen(server: ForkServer | None, argv: Sequence[str], env: Mapping[str, str]
          ) -> subprocess.Popen[str]:
    """``subprocess.Popen(argv, stdout=PIPE, stderr=PIPE, text=True, env=env)``, through
    ``server`` when it can start the command."""
    if server is None or not server.serves(Path(argv[0]).name, env):
        return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=dict(env))
    return server.start(argv, env)
