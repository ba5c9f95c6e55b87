"""Every command meets an unreachable PostgreSQL the same way: a line per try, exit 3, no password."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, cli_env, run_cli

CONFIG = ["--config", str(ROOT / "configs" / "postgres.yaml")]


@pytest.mark.parametrize("argv", [["producer", *CONFIG, "--count", "1"], ["jobq", "stats", *CONFIG],
                                  ["jobq", "init", *CONFIG], ["consumer", *CONFIG, "-p", "noop"]])
def test_unreachable_server_exits_3_naming_host_and_port(argv: list[str]) -> None:
    env = cli_env(JOBQ_PG_DSN="host=127.0.0.1 port=1 user=jobq password=s3cret dbname=x",
                  JOBQ_CONNECT__ATTEMPTS="3", JOBQ_CONNECT__BACKOFF_BASE="0.05")
    result = run_cli(*argv, env=env, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr
    tries = [line for line in result.stderr.splitlines() if "cannot reach PostgreSQL at 127.0.0.1:1" in line]
    assert len(tries) == 3  # attempts 1/3 and 2/3 logged, then the final one-line error
    assert tries[-1].startswith("jobq: cannot reach PostgreSQL at 127.0.0.1:1 after 3 attempts")
