"""The fault suite's server faults (faults/server_faults.py) and the suite's promise to leave
the servers running, with a stand-in backend: no server is stopped, crashed or started here."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from faults import cli, servers, suite
from faults.backend import Cut, FinalState, Options
from faults.postgres import ACK_SLACK_S, PostgresBackend
from faults.rabbitmq import RabbitBackend
from faults.report import Summary, write_report
from faults.server_faults import ServerFaults
from faults.servers import ServerDown


class FakeBackend:
    """Records what the suite asks of a server; ``record`` gets completions at each step."""

    name = "fake"

    def __init__(self, record: Path, window: float = 1.0) -> None:
        self.record = record
        self.window = window
        self.calls: list[str] = []
        self.fail: dict[str, BaseException] = {}

    def complete(self, n: int, tag: str) -> None:
        self.record.mkdir(parents=True, exist_ok=True)
        with (self.record / f"{tag}.log").open("a") as out:
            out.write("".join(f"{tag}{i}\n" for i in range(n)))

    def _do(self, what: str) -> None:
        self.calls.append(what)
        if what in self.fail:
            raise self.fail[what]

    def restart_server(self) -> None:
        self._do("restart")

    def kill_server(self) -> None:
        self._do("kill")
        self.complete(3, "dying")  # done between the stop command and the server's end

    def crash_window(self) -> float:
        self._do("window")
        return self.window

    def ensure_up(self) -> None:
        self._do("ensure_up")
        self.complete(50, "after")  # the server is back: nothing of these is undone

    def setup(self) -> None:
        self._do("setup")

    def cleanup(self) -> None:
        self._do("cleanup")

    def remaining(self) -> int | None:
        return 0

    def disrupt(self, pids: set[int]) -> Cut:
        return Cut()

    def final_state(self, accepted: list[str]) -> FinalState:
        return FinalState(done=set(accepted))

    def consumer_command(self, record_dir: Path, options: Options, index: int
                         ) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("no consumer is started here")

    async def enqueue(self, count: int) -> list[str]:
        return []


def faults(tmp_path: Path, kind: str, window: float = 1.0
           ) -> tuple[ServerFaults, FakeBackend, Summary, list[float]]:
    record = tmp_path / "record"
    backend = FakeBackend(record, window)
    summary = Summary(transport="fake", jobs=100)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        backend.complete(7, "window")  # done within the window before the crash

    backend.complete(20, "earlier")
    return ServerFaults(backend, summary, record, kind, sleep=sleep), backend, summary, slept


def test_both_is_a_restart_at_30_percent_then_a_crash_at_60(tmp_path: Path) -> None:
    injected, backend, summary, _ = faults(tmp_path, "both")
    for remaining in (100, 71, None):
        assert injected.step(remaining, live=3)
    assert backend.calls == []
    assert injected.step(70, live=3) and backend.calls == ["restart"]
    assert injected.step(41, live=3) and backend.calls == ["restart"]
    assert injected.step(35, live=4)
    assert backend.calls == ["restart", "window", "kill", "ensure_up"]
    assert injected.step(0, live=4) and len(backend.calls) == 4  # each fault once
    assert (summary.restarts, summary.crashes) == (1, 1)
    assert summary.server_faults == ["restart@30%", "crash@60%"]
    assert summary.exposures == 3 + 4  # every live consumer, at each fault
    assert summary.problems == []


@pytest.mark.parametrize(("kind", "expected"), [
    ("restart", ["restart@30%"]), ("crash", ["crash@30%"]), ("none", [])])
def test_each_kind_gets_its_own_faults(tmp_path: Path, kind: str, expected: list[str]) -> None:
    injected, _, summary, _ = faults(tmp_path, kind)
    for remaining in (80, 50, 10, 0):
        injected.step(remaining, live=3)
    assert summary.server_faults == expected


def test_a_crash_counts_what_was_completed_from_its_window_until_the_server_was_down(
        tmp_path: Path) -> None:
    injected, _, summary, slept = faults(tmp_path, "crash", window=0.72)
    injected.step(70, live=3)
    assert slept == [0.72]  # the count before is taken that long before the stop
    assert summary.crash_window_jobs == 7 + 3  # not the 20 earlier, not the 50 after
    assert summary.crashes == 1


def test_a_crash_without_a_window_counts_nothing(tmp_path: Path) -> None:
    injected, _, summary, _ = faults(tmp_path, "crash", window=0.0)
    injected.step(70, live=3)
    assert summary.crash_window_jobs == 0 and summary.crashes == 1


def test_a_crash_that_could_not_be_injected_still_starts_the_server(tmp_path: Path) -> None:
    injected, backend, summary, _ = faults(tmp_path, "crash")
    backend.fail["kill"] = RuntimeError("PostgreSQL did not crash: exit 1")
    assert injected.step(70, live=3)  # the run goes on, failed
    assert backend.calls == ["window", "kill", "ensure_up"]
    assert summary.crashes == 0 and summary.server_faults == ["crash@30% (failed)"]
    assert summary.problems == ["server crash could not be injected: PostgreSQL did not crash: exit 1"]


def test_a_server_that_does_not_come_back_stops_the_run(tmp_path: Path) -> None:
    injected, backend, summary, _ = faults(tmp_path, "crash")
    backend.fail["ensure_up"] = ServerDown("PostgreSQL did not answer within 60s")
    assert not injected.step(70, live=3)
    assert summary.problems == ["server crash: PostgreSQL did not answer within 60s"]


def test_the_duplicate_bound_of_a_run_counts_its_crash_windows(tmp_path: Path) -> None:
    run = suite.Run(FakeBackend(tmp_path / "record"), Options(), tmp_path, tmp_path / "logs")
    run.summary.capacity, run.summary.exposures, run.summary.crash_window_jobs = 32, 3, 100
    run.check([])
    assert run.summary.duplicate_bound == 196


def interrupted_run(tmp_path: Path, backend: FakeBackend) -> suite.Run:
    backend.fail["setup"] = KeyboardInterrupt()
    return suite.Run(backend, Options(), tmp_path, tmp_path / "logs")


def test_ctrl_c_mid_run_still_starts_the_server_and_cleans_up(tmp_path: Path) -> None:
    backend = FakeBackend(tmp_path / "record")
    with pytest.raises(KeyboardInterrupt):
        interrupted_run(tmp_path, backend).execute()
    assert backend.calls == ["setup", "ensure_up", "cleanup"]


def test_a_second_ctrl_c_while_the_server_starts_waits_until_it_is_up(tmp_path: Path) -> None:
    backend = FakeBackend(tmp_path / "record")
    started = backend.ensure_up

    def impatient() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the operator presses Ctrl-C again
        started()

    backend.ensure_up = impatient  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        interrupted_run(tmp_path, backend).execute()
    assert backend.calls == ["setup", "ensure_up", "cleanup"]


def test_a_server_left_down_ends_the_suite_loudly(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    def down(*_: object) -> Summary:
        raise ServerDown("RabbitMQ did not answer within 120s")
    monkeypatch.setattr(suite, "run_one", down)
    assert suite.main(["--transports", "rabbitmq-quorum", "--report", str(tmp_path / "r")]) == 2
    assert "chaos: FATAL: RabbitMQ did not answer within 120s" in capsys.readouterr().err


def test_ctrl_c_ends_the_suite_with_130(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def interrupted(*_: object) -> Summary:
        raise KeyboardInterrupt
    monkeypatch.setattr(suite, "run_one", interrupted)
    assert suite.main(["--report", str(tmp_path / "r")]) == 130
    assert "every server it stopped was started again" in capsys.readouterr().err


def test_server_fault_defaults_to_both_and_no_restart_means_none() -> None:
    assert cli.parse([], suite.__doc__)[1].server_fault == "both"
    assert cli.parse(["--server-fault", "crash"], suite.__doc__)[1].server_fault == "crash"
    assert cli.parse(["--no-restart"], suite.__doc__)[1].server_fault == "none"
    with pytest.raises(SystemExit):
        cli.parse(["--server-fault", "reboot"], suite.__doc__)


def test_the_help_says_the_servers_are_left_running(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(["--help"], suite.__doc__)
    text = " ".join(capsys.readouterr().out.split())
    assert "The servers are always left running" in text and "Ctrl-C" in text
    assert "--server-fault {restart,crash,both,none}" in text


def test_the_summary_line_and_report_say_which_server_faults_each_run_had(tmp_path: Path) -> None:
    summary = Summary(transport="postgres-lease", restarts=1, crashes=1,
                      server_faults=["restart@30%", "crash@60%"], crash_window_jobs=12)
    assert "restarts=1 crashes=1 server_faults=restart@30%,crash@60% " in summary.line()
    assert "server_faults=none " in Summary(transport="x").line()
    write_report([summary], Options(), tmp_path / "chaos")
    table = (tmp_path / "chaos.md").read_text()
    assert "| server faults |" in table and "| restart@30%, crash@60% |" in table
    assert "| crash window jobs |" in table and "| 12 |" in table


def test_postgres_lease_mode_crash_window_is_three_wal_writer_delays_and_the_ack_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = PostgresBackend("lease")
    monkeypatch.setattr(backend, "_count", lambda query: 200)  # wal_writer_delay, ms
    assert backend.crash_window() == pytest.approx(3 * 0.2 + 0.02 + ACK_SLACK_S)


def test_transaction_mode_and_rabbitmq_have_no_crash_window(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = PostgresBackend("transaction")
    monkeypatch.setattr(backend, "_count", lambda query: pytest.fail("asked the server"))
    assert backend.crash_window() == 0.0
    assert RabbitBackend("quorum").crash_window() == 0.0


def test_the_backends_crash_and_start_through_faults_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []
    for name in ("crash_postgres", "start_postgres", "crash_rabbit", "start_rabbit"):
        monkeypatch.setattr(servers, name, lambda *a, _n=name: calls.append((_n, *a)))
    pg = PostgresBackend("lease", dsn="postgresql://postgres@127.0.0.1:5433/test")
    pg.kill_server()
    pg.ensure_up()
    rabbit = RabbitBackend("classic")
    rabbit.kill_server()
    rabbit.ensure_up()
    assert calls == [("crash_postgres", "127.0.0.1", 5433), ("start_postgres", "127.0.0.1", 5433),
                     ("crash_rabbit",), ("start_rabbit",)]
