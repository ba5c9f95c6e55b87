"""What a hung consumer was doing, taken before the suite kills it: py-spy, SIGUSR1, its log."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from faults.backend import BIN

LOG_TAIL = 60  # lines: the SIGUSR1 dump logs one block per task, and the lines before the hang


def handles(pid: int, signum: int) -> bool:
    """True when process ``pid`` catches ``signum`` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def py_spy(pid: int) -> str:
    """The threads' Python stacks, read by py-spy from outside (the process need not help)."""
    spy = shutil.which("py-spy", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        return "py-spy: not installed (pip install -e '.[dev]')"
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return "py-spy: no answer within 30s"
    if done.returncode != 0:
        return f"py-spy: exit {done.returncode}: {done.stderr.strip()}"
    return done.stdout


def ask_for_task_stacks(pid: int) -> str:
    """SIGUSR1, if the consumer handles it (it logs every asyncio task's stack); never kill it."""
    # Unhandled, SIGUSR1 terminates the process: the stacks would be lost with it.
    if not handles(pid, signal.SIGUSR1):
        return "SIGUSR1: not handled by this consumer; no task stacks asked for"
    os.kill(pid, signal.SIGUSR1)
    time.sleep(1.0)  # the handler logs from the event loop, if that still turns
    return "SIGUSR1: sent; the task stacks, if the loop still runs, are in the log tail below"


def capture(pid: int, log: Path) -> str:
    """py-spy's thread stacks, the consumer's own task stacks (SIGUSR1), then its log tail."""
    parts = [f"pid {pid}", py_spy(pid), ask_for_task_stacks(pid)]
    try:
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
    except OSError as exc:
        tail = [f"(log unreadable: {exc})"]
    parts.append(f"last {len(tail)} lines of {log.name}:\n" + "\n".join(tail))
    return "\n\n".join(parts)
