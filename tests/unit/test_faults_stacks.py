"""A hung consumer's stacks for the fault suite's report (faults/stacks.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from faults import stacks


def test_stacks_ask_for_sigusr1_only_from_a_process_that_handles_it(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        assert not stacks.handles(os.getpid(), signal.SIGUSR1)
        assert "not handled" in stacks.ask_for_task_stacks(os.getpid())
        signal.signal(signal.SIGUSR1, lambda *_: None)
        assert stacks.handles(os.getpid(), signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_hung_process_gets_its_stacks_and_log_tail_in_the_report(tmp_path: Path) -> None:
    log = tmp_path / "consumer-0.err"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        text = stacks.capture(sleeper.pid, log)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert f"pid {sleeper.pid}" in text and "line 99" in text and "line 39\n" not in text
    assert "py-spy" in text or "Thread" in text  # py-spy's dump, or why there is none
