"""`make demo` (examples/life): on both backends a job works, one is retried with its
traceback, one dies and is retried from the command line, one waits for its delay; then the
drain figure. What a newcomer is told happens, happens."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_the_demo_shows_a_jobs_life_on_both_backends(pg_dsn: str, amqp_url: str) -> None:
    ran = subprocess.run([sys.executable, "-m", "examples.life"], cwd=ROOT, capture_output=True,
                         text=True, timeout=240)
    out = ran.stdout
    assert ran.returncode == 0, (out[-3000:], ran.stderr[-3000:])
    for transport in ("postgres", "rabbitmq"):
        part = out.split(f"== {transport}: queue ")[1].split("\n== ")[0]
        assert "(sync_crm) attempt 1/4 retried in " in part, part
        assert "Traceback (most recent call last)" in part and "TimeoutError: the CRM" in part
        assert "(charge) attempt 2/2 dead" in part, part
        assert "$ jobq dead list" in part and "$ jobq jobs show" in part, part
        assert "requeued: it was dead" in part and "charge Ada done" in part, part
        assert "stopped: ok=" in part, part
    figures = out.split("== 5,000 no-op jobs")[1]
    assert "postgres" in figures and "rabbitmq" in figures and "jobs/s" in figures, figures
