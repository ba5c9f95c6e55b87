"""The fork server: imports what the commands need once, then forks a child per command."""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import gc
import json
import os
import selectors
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from tests.forkserver.wire import HEADER, scripts


@dataclass
class Request:
    """A command to run, as the child's own: argv, environment, working directory, and the
    descriptors for its stdin, stdout and stderr."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]


def preload() -> dict[str, Callable[[], Any]]:
    """Import what the commands would: jobq's modules (but the web and framework ones, which
    no command imports), the drivers, and the tests' processors. The entry points by name."""
    from jobq.wiring.lean import import_container_lean

    import_container_lean()  # as every command does, before anything imports FastAPI
    import jobq

    skip = ("jobq.contrib", "jobq.dashboard", "jobq.testing")
    for path in sorted(Path(jobq.__file__).parent.rglob("*.py")):
        parts = path.relative_to(Path(jobq.__file__).parent.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not name.startswith(skip):
            import_module(name)
    import_module("tests.processors")
    entries = {name: getattr(import_module(module), function) for name, (module, _, function)
               in ((name, target.partition(":")) for name, target in scripts().items())}
    if threading.active_count() != 1:  # a thread would not survive the fork
        raise RuntimeError(f"preloading started threads: {threading.enumerate()}")
    return entries


def receive(conn: socket.socket) -> Request:
    """One request: a length, the JSON, and three descriptors beside it."""
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    (size,) = HEADER.unpack(head)
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("request cut short")
        data += chunk
    fields = json.loads(data)
    return Request(fields["argv"], fields["env"], fields["cwd"], list(fds))


def serve(path: str) -> Request:
    """Answer requests until the test process goes (its end of stdin closes): fork a child per
    request, send it the child's pid, and later its exit status. Returns, in the child only,
    the child's request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj == 0 and not os.read(0, 512):  # the test process has ended
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # the socket, the log
                sys.exit(0)
            if key.fileobj is listener:
                conn, _ = listener.accept()
                request = receive(conn)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    for sock in (listener, conn, *waiting.values()):
                        sock.close()
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    return request
                for fd in request.fds:
                    os.close(fd)
                conn.sendall(f"pid {pid}\n".encode())
                waiting[pid] = conn
            if key.fileobj == wake_r:
                os.read(wake_r, 512)
                reap(waiting)


def reap(waiting: dict[int, socket.socket]) -> None:
    """Send each ended child's exit status (as ``Popen.returncode`` gives it) to its test."""
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(OSError):  # the test may have gone
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        conn.close()


def become(request: Request) -> None:
    """In the child: take the request's descriptors, environment, directory and argv."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = request.argv
    if request.env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    else:
        faulthandler.disable()


def finish(entry: Callable[[], Any]) -> None:
    """Run the entry point as the console script would (``sys.exit(entry())``), and end as
    the interpreter does: an uncaught exception's traceback (exit 1), an interrupt's signal,
    the other threads joined, atexit's functions run, cyclic garbage finalized, the streams
    flushed. Then ``os._exit``: tearing down every module the server imported would copy most
    of its memory into the child (0.2 s of CPU a command)."""
    interrupted = False  # as Python does then: the signal's default action, after the rest
    try:
        code: Any = entry()
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        sys.excepthook(*sys.exc_info())
        interrupted, code = isinstance(exc, KeyboardInterrupt), 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    gc.collect()
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit((code or 0) & 0xFF)


def main() -> None:
    entries = preload()
    gc.freeze()  # the imports' objects are never collected, so never touched, in a child
    request = serve(sys.argv[1])
    become(request)
    finish(entries[Path(request.argv[0]).name])


if __name__ == "__main__":
    main()
