"""The fault suite SIGTERMs a survivor only once it handles the signal (faults/suite.py)."""

from __future__ import annotations

import subprocess
import sys

from faults.suite import handles_sigterm
from tests.conftest import wait_until

HANDLES = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
           "print('ready', flush=True)\n"
           "time.sleep(30)\n")


def test_a_process_that_only_sleeps_does_not_handle_sigterm_one_with_a_handler_does() -> None:
    plain = subprocess.Popen(["sleep", "30"])
    handling = subprocess.Popen([sys.executable, "-c", HANDLES], stdout=subprocess.PIPE,
                                text=True)
    try:
        assert handling.stdout is not None and handling.stdout.readline() == "ready\n"
        assert handles_sigterm(handling.pid)
        assert not handles_sigterm(plain.pid)
    finally:
        plain.kill()
        handling.kill()
        plain.wait()
        handling.wait()
    assert wait_until(lambda: not handles_sigterm(handling.pid), 5)  # gone: not handled
