"""Crash the local servers and bring them back, each wait bounded and each failure loud.

PostgreSQL: `pg_ctlcluster ... stop -m immediate` (the postmaster SIGQUITs every backend; no
checkpoint, WAL not yet written is gone, the start replays the log as after a power cut), then
the start `.ci/run` uses, until `pg_isready` answers. RabbitMQ: kill -9 of the node's beam.smp
(no shutdown at all), then `rabbitmq-server -detached` (or `rabbitmqctl start_app` when only the
app was stopped), until `rabbitmq-diagnostics check_port_connectivity` answers.

A server that does not come back within its bound raises ServerDown: the run cannot go on, and
the suite says so instead of counting every job the consumers could not reach as lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PG_ETC = Path("/etc/postgresql")
PG_READY_S = 60.0  # crash recovery of the suite's few hundred MB of WAL takes seconds here
RABBIT_READY_S = 120.0  # as .ci/run: a node recovering its quorum queues is slow to listen
GONE_S = 30.0  # a SIGKILLed beam.smp is gone in milliseconds; more means the kill missed
POLL_S = 0.5
# The node's beam.smp boots the rabbit application; the CLI tools' beam.smp do not.
PGREP_NODE = r"beam\.smp.* -s rabbit boot( |$)"

# Seams for the tests: the clock and the sleep the bounded waits use, and the kill.
_clock: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep
_kill: Callable[[int, int], None] = os.kill


class ServerDown(RuntimeError):
    """A server did not answer within its bound after the suite stopped or started it."""


def command(*argv: str, timeout: float = 120, daemon: bool = False
            ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` quietly; a command that does not finish in ``timeout`` reads as exit 124.

    ``daemon``: it leaves a server running, which would hold a captured pipe open (and this
    call waiting) for as long as the server lives: its output goes to /dev/null instead.
    """
    out = subprocess.DEVNULL if daemon else subprocess.PIPE
    try:
        return subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"no answer in {timeout:g}s")
    except OSError as exc:  # not installed: as a shell would say it
        return subprocess.CompletedProcess(list(argv), 127, "", str(exc))


def said(done: subprocess.CompletedProcess[str]) -> str:
    """What a finished command said, for an error message: exit code and its last words."""
    words = ((done.stderr or "").strip() or (done.stdout or "").strip()).splitlines()[-3:]
    return f"`{' '.join(done.args)}` exit {done.returncode}" + (f": {' '.join(words)}" if words else "")


def wait_until(check: Callable[[], bool], timeout: float, failure: str) -> None:
    """Poll ``check`` until it holds; ServerDown(``failure`` + the bound) when ``timeout`` passes."""
    deadline = _clock() + timeout
    while not check():
        if _clock() >= deadline:
            raise ServerDown(f"{failure} within {timeout:g}s")
        _sleep(POLL_S)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then raise it: a second Ctrl-C must not leave a server down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


# PostgreSQL

def pg_ctlcluster(action: str, *extra: str) -> list[str]:
    """The pg_ctlcluster command line for the newest installed cluster ``main``."""
    version = sorted(os.listdir(PG_ETC))[-1]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action, *extra]


def pg_ready(host: str, port: int) -> bool:
    """True when the server accepts connections (pg_isready exit 0; not while it recovers)."""
    return command("pg_isready", "-q", "-h", host, "-p", str(port), "-t", "3", timeout=10).returncode == 0


def crash_postgres(host: str, port: int) -> None:
    """Stop the server the way a crash would (`-m immediate`); RuntimeError if it is still up."""
    done = command(*pg_ctlcluster("stop", "-m", "immediate"))
    if done.returncode != 0 or pg_ready(host, port):
        raise RuntimeError(f"PostgreSQL did not crash: {said(done)}")


def start_postgres(host: str, port: int) -> None:
    """Start the server if it does not answer, and wait until it does (ServerDown if not)."""
    if pg_ready(host, port):
        return
    done = command(*pg_ctlcluster("start"))  # "already running" is fine: the wait decides
    wait_until(lambda: pg_ready(host, port), PG_READY_S,
               f"PostgreSQL did not answer `pg_isready -h {host} -p {port}` after {said(done)}")


# RabbitMQ

def rabbit_pid() -> int | None:
    """The pid of the RabbitMQ node's beam.smp; None when no node runs."""
    done = command("rabbitmqctl", "eval", "os:getpid().", timeout=30)
    if done.returncode == 0 and done.stdout.strip().strip('"').isdigit():
        return int(done.stdout.strip().strip('"'))
    # The node may be too wedged to answer rabbitmqctl: find its beam.smp by command line.
    found = command("pgrep", "-f", PGREP_NODE, timeout=10)
    pids = [int(p) for p in found.stdout.split() if p.isdigit()]
    if len(pids) > 1:
        raise RuntimeError(f"more than one RabbitMQ node runs here (beam.smp {pids})")
    return pids[0] if pids else None


def gone(pid: int) -> bool:
    """True when process ``pid`` has exited (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def rabbit_ready() -> bool:
    """True when the node's listeners accept connections (what .ci/run waits for)."""
    return command("rabbitmq-diagnostics", "-q", "check_port_connectivity", timeout=20).returncode == 0


def crash_rabbit() -> None:
    """kill -9 the node's beam.smp and wait until it is gone; RuntimeError if there is none."""
    pid = rabbit_pid()
    if pid is None:
        raise RuntimeError("RabbitMQ did not crash: no node runs (rabbitmqctl eval, pgrep beam.smp)")
    _kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid), GONE_S, f"RabbitMQ's beam.smp (pid {pid}) did not exit on SIGKILL")


def start_rabbit() -> None:
    """Start the node (or only its app) if it does not answer, and wait until it does."""
    if rabbit_ready():
        return
    if rabbit_pid() is None:
        done = command("rabbitmq-server", "-detached", daemon=True)
    else:  # the node runs, its app was stopped (a restart interrupted)
        done = command("rabbitmqctl", "start_app")
    wait_until(rabbit_ready, RABBIT_READY_S,
               f"RabbitMQ did not answer `rabbitmq-diagnostics -q check_port_connectivity` "
               f"after {said(done)}")
