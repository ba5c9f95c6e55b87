"""A benchmark (or `make bench-quick`) against servers that do not answer says so at once, naming the
address and how to start each, and exits non-zero without running a case."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, cli_env


def test_unreachable_servers_are_named_at_once_with_how_to_start_them(tmp_path: Path) -> None:
    env = cli_env(JOBQ_PG_DSN="postgresql://bench:s3cret@127.0.0.1:1/test",
                  JOBQ_AMQP_URL="amqp://bench:s3cret@127.0.0.1:2/")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--targets",
                           "postgres-lease,rabbitmq-quorum", "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 20  # not half a minute per case
    assert "PostgreSQL at 127.0.0.1:1 does not answer" in done.stderr
    assert "RabbitMQ at 127.0.0.1:2 does not answer" in done.stderr
    assert "pg_ctlcluster" in done.stderr and "rabbitmq-server -detached" in done.stderr
    assert "skipping postgres-lease, rabbitmq-quorum" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert not (tmp_path / "out" / "report.md").exists()
