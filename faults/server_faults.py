"""A run's server faults (``--server-fault``): which, when, and what each adds to the bound.

A restart is graceful (`pg_ctlcluster restart`, `rabbitmqctl stop_app; start_app`); a crash is
not (`stop -m immediate`, kill -9 of beam.smp), and then the server is started again. Either
cuts every live consumer off: each is one exposure. A crash may also undo the asynchronous
commits of its last moments, the backend's crash_window: the jobs completed from that long
before the server went down until it was down are counted into the bound (faults/verdict.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from faults.backend import Backend
from faults.report import Summary
from faults.servers import ServerDown
from tests.processors import completions

KINDS = ("restart", "crash", "both", "none")
# When each fault lands, as the share of the jobs ended; "both" spaces them so that the
# consumers are back at work, and exposed again, when the crash comes.
SCHEDULES: dict[str, tuple[tuple[str, float], ...]] = {
    "restart": (("restart", 0.3),), "crash": (("crash", 0.3),),
    "both": (("restart", 0.3), ("crash", 0.6)), "none": ()}


class ServerFaults:
    """The server faults of one run, each injected once when its share of the jobs has ended."""

    def __init__(self, backend: Backend, summary: Summary, record: Path, kind: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.backend = backend
        self.summary = summary
        self.record = record  # the completion record: what the crash window counts
        self.pending = list(SCHEDULES[kind])
        self.sleep = sleep

    def step(self, remaining: int | None, live: int) -> bool:
        """Inject the fault that is due, if any; False when its server did not come back."""
        if not self.pending or remaining is None:
            return True
        fault, at = self.pending[0]
        if remaining > (1 - at) * self.summary.jobs:
            return True
        self.pending.pop(0)
        self.summary.server_faults.append(f"{fault}@{at:.0%}")
        self.summary.exposures += live  # every consumer loses its connections
        try:
            if fault == "restart":
                self.backend.restart_server()
                self.summary.restarts += 1
            else:
                self.crash()
                self.summary.crashes += 1
        except ServerDown as exc:  # nothing more to learn from this run: stop shaking it
            self.summary.problems.append(f"server {fault}: {exc}")
            return False
        except (RuntimeError, subprocess.SubprocessError) as exc:  # not injected: say so
            self.summary.server_faults[-1] += " (failed)"
            self.summary.problems.append(f"server {fault} could not be injected: {exc}")
        return True

    def crash(self) -> None:
        """Crash the server and start it again, counting the completions of its window."""
        window = self.backend.crash_window()
        # Counted `window` before the server can go down: every job whose claim or ack the
        # crash may undo was recorded after this count and before the one below.
        before = len(completions(self.record)) if window else 0
        self.sleep(window)
        try:
            self.backend.kill_server()
            if window:
                self.summary.crash_window_jobs += len(completions(self.record)) - before
        finally:
            self.backend.ensure_up()
