"""The fault suite's server crashes (faults/servers.py) with every command stubbed: no server
is stopped, killed or started here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from faults import servers
from faults.servers import ServerDown

PG_STOP = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "stop", "-m", "immediate"]
PG_START = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "start"]
PG_READY = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432", "-t", "3"]
RABBIT_READY = ["rabbitmq-diagnostics", "-q", "check_port_connectivity"]
RABBIT_PID = ["rabbitmqctl", "eval", "os:getpid()."]


class Commands:
    """A stand-in for servers.command: answers by command line, records every call."""

    def __init__(self, answers: dict[str, Callable[[], tuple[int, str]]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []
        self.daemons: list[list[str]] = []

    def __call__(self, *argv: str, timeout: float = 120, daemon: bool = False
                 ) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if daemon:
            self.daemons.append(list(argv))
        code, out = self.answers.get(" ".join(argv), lambda: (0, ""))()
        return subprocess.CompletedProcess(list(argv), code, out, "cluster says no" if code else "")


def answers(*values: tuple[int, str]) -> Callable[[], tuple[int, str]]:
    """Each call the next answer; the last one from then on."""
    queue = list(values)
    return lambda: queue.pop(0) if len(queue) > 1 else queue[0]


NOT_READY, READY = (2, ""), (0, "")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """A fake clock that each poll's sleep moves on; /etc/postgresql with versions 13 and 15."""
    now = [0.0]
    monkeypatch.setattr(servers, "_clock", lambda: now[0])
    monkeypatch.setattr(servers, "_sleep", lambda s: now.__setitem__(0, now[0] + s))
    for version in ("13", "15"):
        (tmp_path / version).mkdir()
    monkeypatch.setattr(servers, "PG_ETC", tmp_path)
    return now


def use(monkeypatch: pytest.MonkeyPatch, commands: Commands) -> Commands:
    monkeypatch.setattr(servers, "command", commands)
    return commands


def test_a_postgres_crash_is_an_immediate_stop_of_the_newest_cluster(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({" ".join(PG_READY): answers(NOT_READY)}))
    servers.crash_postgres("127.0.0.1", 5432)
    assert commands.calls == [PG_STOP, PG_READY]


@pytest.mark.parametrize("stop, ready", [((1, ""), NOT_READY), ((0, ""), READY)])
def test_a_postgres_crash_that_did_not_happen_fails(
        monkeypatch: pytest.MonkeyPatch, clock: list[float], stop: tuple[int, str],
        ready: tuple[int, str]) -> None:
    use(monkeypatch, Commands({" ".join(PG_STOP): answers(stop),
                               " ".join(PG_READY): answers(ready)}))
    with pytest.raises(RuntimeError, match="PostgreSQL did not crash: `pg_ctlcluster"):
        servers.crash_postgres("127.0.0.1", 5432)


def test_postgres_is_started_and_waited_for_until_pg_isready_answers(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({
        " ".join(PG_READY): answers(NOT_READY, NOT_READY, NOT_READY, READY)}))
    servers.start_postgres("127.0.0.1", 5432)
    assert commands.calls == [PG_READY, PG_START, PG_READY, PG_READY, PG_READY]


def test_postgres_already_up_is_left_alone(monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({}))
    servers.start_postgres("127.0.0.1", 5432)
    assert commands.calls == [PG_READY]


def test_postgres_that_does_not_come_back_fails_loudly_within_the_bound(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({" ".join(PG_READY): answers(NOT_READY),
                                          " ".join(PG_START): answers((1, ""))}))
    with pytest.raises(ServerDown) as failed:
        servers.start_postgres("127.0.0.1", 5432)
    assert str(failed.value) == (
        "PostgreSQL did not answer `pg_isready -h 127.0.0.1 -p 5432` after "
        "`pg_ctlcluster --skip-systemctl-redirect 15 main start` exit 1: cluster says no "
        "within 60s")
    assert clock[0] == servers.PG_READY_S  # waited the whole bound, and not longer
    polls = commands.calls.count(PG_READY)
    assert polls == servers.PG_READY_S / servers.POLL_S + 2  # before the start, then each poll


def test_the_rabbitmq_node_is_found_by_asking_it_then_by_its_command_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((0, '"2959"\n'))}))
    assert servers.rabbit_pid() == 2959
    commands = use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((69, "")),
                                          f"pgrep -f {servers.PGREP_NODE}": answers((0, "4242\n"))}))
    assert servers.rabbit_pid() == 4242
    assert commands.calls[1] == ["pgrep", "-f", servers.PGREP_NODE]
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((69, "")),
                               f"pgrep -f {servers.PGREP_NODE}": answers((1, ""))}))
    assert servers.rabbit_pid() is None
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((69, "")),
                               f"pgrep -f {servers.PGREP_NODE}": answers((0, "1\n2\n"))}))
    with pytest.raises(RuntimeError, match=r"more than one RabbitMQ node runs here \(beam.smp \[1, 2\]\)"):
        servers.rabbit_pid()


def test_the_pgrep_pattern_matches_the_node_and_not_the_cli_tools() -> None:

    node = ("/usr/lib/erlang/erts-13.1.5/bin/beam.smp -W w -MBas ageffcbf -- -root /usr/lib/erlang "
            "-progname erl -- -home /var/lib/rabbitmq -- -pa  -noshell -noinput -s rabbit boot "
            "-boot start_sasl -syslog logger []")
    cli = ("/usr/lib/erlang/erts-13.1.5/bin/beam.smp -B -- -root /usr/lib/erlang -progname erl "
           "-- -home /var/lib/rabbitmq -- -noshell -noinput -s elixir start_cli -extra "
           "/usr/lib/rabbitmq/bin/rabbitmqctl eval os:getpid().")
    assert re.search(servers.PGREP_NODE, node) and not re.search(servers.PGREP_NODE, cli)


def test_a_rabbitmq_crash_is_a_sigkill_of_the_node_then_waits_until_it_is_gone(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((0, '"2959"'))}))
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(servers, "_kill", lambda pid, sig: killed.append((pid, sig)))
    left = iter([False, False, True])
    monkeypatch.setattr(servers, "gone", lambda pid: next(left))
    servers.crash_rabbit()
    assert killed == [(2959, signal.SIGKILL)]
    assert clock[0] == 2 * servers.POLL_S


def test_a_rabbitmq_node_that_outlives_sigkill_fails_within_the_bound(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((0, '"2959"'))}))
    monkeypatch.setattr(servers, "_kill", lambda pid, sig: None)
    monkeypatch.setattr(servers, "gone", lambda pid: False)
    with pytest.raises(ServerDown, match=r"beam.smp \(pid 2959\) did not exit on SIGKILL within 30s"):
        servers.crash_rabbit()


def test_no_rabbitmq_node_to_crash_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, Commands({" ".join(RABBIT_PID): answers((69, "")),
                               f"pgrep -f {servers.PGREP_NODE}": answers((1, ""))}))
    monkeypatch.setattr(servers, "_kill", lambda pid, sig: pytest.fail("killed something"))
    with pytest.raises(RuntimeError, match="RabbitMQ did not crash: no node runs"):
        servers.crash_rabbit()


def test_a_crashed_rabbitmq_node_is_started_detached_and_waited_for(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({
        " ".join(RABBIT_READY): answers(NOT_READY, NOT_READY, READY),
        " ".join(RABBIT_PID): answers((69, "")),
        f"pgrep -f {servers.PGREP_NODE}": answers((1, ""))}))
    servers.start_rabbit()
    assert ["rabbitmq-server", "-detached"] in commands.calls
    assert commands.daemons == [["rabbitmq-server", "-detached"]]  # no pipe held open by the node
    assert commands.calls[-2:] == [RABBIT_READY, RABBIT_READY]


def test_a_node_whose_app_was_stopped_gets_start_app(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    commands = use(monkeypatch, Commands({
        " ".join(RABBIT_READY): answers(NOT_READY, READY),
        " ".join(RABBIT_PID): answers((0, '"2959"'))}))
    servers.start_rabbit()
    assert ["rabbitmqctl", "start_app"] in commands.calls
    assert ["rabbitmq-server", "-detached"] not in commands.calls


def test_rabbitmq_that_does_not_come_back_fails_loudly_within_the_bound(
        monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    use(monkeypatch, Commands({" ".join(RABBIT_READY): answers(NOT_READY),
                               " ".join(RABBIT_PID): answers((69, "")),
                               f"pgrep -f {servers.PGREP_NODE}": answers((1, ""))}))
    with pytest.raises(ServerDown) as failed:
        servers.start_rabbit()
    assert str(failed.value) == (
        "RabbitMQ did not answer `rabbitmq-diagnostics -q check_port_connectivity` after "
        "`rabbitmq-server -detached` exit 0 within 120s")
    assert clock[0] == servers.RABBIT_READY_S


def test_a_command_that_hangs_or_is_missing_reads_as_a_failed_exit() -> None:
    assert servers.command(sys.executable, "-c", "import time; time.sleep(5)",
                           timeout=0.2).returncode == 124
    missing = servers.command("no-such-command-jobq")
    assert missing.returncode == 127 and "no-such-command-jobq" in servers.said(missing)


def test_a_daemon_started_does_not_keep_the_call_waiting() -> None:
    # A captured pipe stays open as long as anything the command left running holds it:
    # rabbitmq-server -detached would hold it for the node's whole life.
    started = time.monotonic()
    done = servers.command("sh", "-c", "sleep 3 & echo started", daemon=True, timeout=10)
    assert done.returncode == 0 and time.monotonic() - started < 2


def test_ctrl_c_while_restoring_is_held_until_the_block_ends() -> None:
    previous = signal.getsignal(signal.SIGINT)
    finished = False
    with pytest.raises(KeyboardInterrupt), servers.sigint_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here; it must not raise
        finished = True
    assert finished and signal.getsignal(signal.SIGINT) is previous


def test_without_ctrl_c_the_block_ends_quietly() -> None:
    with servers.sigint_deferred():
        pass
