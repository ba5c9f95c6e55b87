"""A small run of the fault suite (kill -9 and backend cuts, no server restart), < 30 s.

The full suite (`make chaos`: 50,000 jobs per transport and a server restart) runs outside
the default test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_chaos_smoke_postgres_lease_loses_nothing(pg_dsn: str, tmp_path: Path) -> None:
    report = tmp_path / "chaos"
    done = subprocess.run(
        [sys.executable, "-m", "faults", "--transports", "postgres-lease", "--jobs", "3000",
         "--sleep-ms", "20", "--kill-every", "1.5", "--terminate-every", "1", "--lease", "2",
         "--no-restart", "--timeout", "60", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads(report.with_suffix(".json").read_text())["runs"]
    assert run["ok"] and run["lost"] == 0 and run["unfinished"] == 0
    assert run["jobs"] == 3000 and run["kills"] >= 1 and run["terminated_backends"] >= 1
    assert run["survivors"] == run["survivors_exit_0"] == 3
    assert "chaos postgres-lease: jobs=3000" in done.stdout and " lost=0 " in done.stdout
