"""The tests' fork server (tests/forkserver.py) starts a command as exec would: its argv,
environment, pipes and exit status, and signals that reach the command itself."""

from __future__ import annotations

import signal
import subprocess

import pytest

from jobq import __version__
from tests import forkserver
from tests.conftest import Stderr, cli_env, command, pg_args


@pytest.fixture(scope="module")
def server() -> forkserver.ForkServer:
    return forkserver.ForkServer(cli_env())


def unreachable() -> dict[str, str]:
    """A consumer's environment whose server never answers: it retries until stopped."""
    return cli_env(JOBQ_PG_DSN="postgresql://postgres@127.0.0.1:9/test",
                   JOBQ_CONNECT__ATTEMPTS="1000", JOBQ_CONNECT__BACKOFF_MAX="0.2")


def test_a_forked_command_prints_and_exits_as_an_execd_one(server: forkserver.ForkServer) -> None:
    for line in (["jobq", "--version"], ["consumer", "--no-such-option"],
                 ["consumer", *pg_args("q"), "-p", "noop", "--once"]):
        env = cli_env(JOBQ_POSTGRES__RETENTION__BATCH="0")  # a config error: exit 2
        argv = [command(line[0]), *line[1:]]
        forked = forkserver.run(server, argv, env, timeout=60)
        execd = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            execd.returncode, execd.stdout, execd.stderr), line
    assert forked.returncode == 2 and "postgres.retention.batch" in forked.stderr
    assert forkserver.run(server, [command("jobq"), "--version"], cli_env(), 60).stdout == \
        f"jobq {__version__}\n"


def test_signals_reach_the_command_and_its_status_comes_back(
        server: forkserver.ForkServer) -> None:
    proc = forkserver.popen(server, [command("consumer"), *pg_args("q"), "-p", "noop"],
                            unreachable())
    assert isinstance(proc, forkserver.Forked)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    err = Stderr(proc)
    err.wait_for("127.0.0.1:9", 30)  # its retries, logged to the test's pipe
    proc.send_signal(signal.SIGTERM)  # still retrying its connection: ends, exit 0
    assert proc.wait(timeout=30) == 0, err.text()

    killed = forkserver.popen(server, [command("consumer"), *pg_args("q"), "-p", "noop"],
                              unreachable())
    killed.kill()
    assert killed.wait(timeout=30) == -signal.SIGKILL


def test_a_command_that_would_start_otherwise_is_execd(server: forkserver.ForkServer) -> None:
    env = cli_env(PYTHONPATH="/nowhere")  # the processors could not be imported in the server
    proc = forkserver.popen(server, [command("jobq"), "--version"], env)
    assert not isinstance(proc, forkserver.Forked)
    assert proc.communicate(timeout=60)[0] == f"jobq {__version__}\n"


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "execd"])
def test_a_stderr_reader_keeps_its_pipe_through_communicate(
        server: forkserver.ForkServer, forked: bool) -> None:
    """Once a test reads a command's stderr through ``Stderr``, a ``communicate`` reads stdout
    only. Before, it read and closed stderr under the reader's thread too ("I/O operation on
    closed file" in that thread, and lines lost to whichever read them first)."""
    proc = forkserver.popen(server if forked else None,
                            [command("consumer"), *pg_args("q"), "-p", "noop"], unreachable())
    assert isinstance(proc, forkserver.Forked) is forked
    err = Stderr(proc)
    err.wait_for("127.0.0.1:9", 30)
    proc.send_signal(signal.SIGTERM)
    out, rest = proc.communicate(timeout=30)
    assert (proc.returncode, out, rest) == (0, "", None)
    assert "127.0.0.1:9" in err.text()
