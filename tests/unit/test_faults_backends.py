"""The fault suite's backends without servers: capacity, consumer names, the broker reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from faults import rabbitmq
from faults.backend import Options, capacity, consumer_settings
from faults.postgres import PostgresBackend
from faults.rabbitmq import RabbitBackend
from jobq.worker.sizing import CEILING


@pytest.mark.parametrize(("backend", "expected"), [
    (PostgresBackend("lease"), 16 + CEILING),  # -n 16, buffer -1: as far as jobq may grow it
    (PostgresBackend("transaction"), 16),  # concurrency capped at 8 for the shared server
    (RabbitBackend("quorum"), 32),  # prefetch 0: concurrency + buffer
])
def test_capacity_comes_from_the_settings_consumers_start_with(
        backend: PostgresBackend | RabbitBackend, expected: int, tmp_path: Path) -> None:
    argv, env = backend.consumer_command(tmp_path, Options(concurrency=16), 0)
    assert capacity(consumer_settings(argv, env)) == expected


def test_postgres_consumers_are_told_apart_by_application_name(tmp_path: Path) -> None:
    backend = PostgresBackend("lease")
    envs = [backend.consumer_command(tmp_path, Options(), i)[1]["JOBQ_PG_DSN"] for i in (0, 1)]
    assert f"{backend.app}-c0" in envs[0] and f"{backend.app}-c1" in envs[1]


def _ctl(returncode: int, stdout: str = "") -> object:
    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["rabbitmqctl", *args], returncode, stdout, "boom")
    return run


def test_a_failed_rabbitmqctl_fails_the_final_state_instead_of_reading_as_empty(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The old final_state took `unfinished = self._messages() or 0`: a failed listing read as 0.
    monkeypatch.setattr(rabbitmq, "rabbitmqctl", _ctl(69))
    with pytest.raises(RuntimeError, match=r"exit 69\): boom"):
        RabbitBackend("quorum").final_state(["1"])


def test_a_listing_without_the_runs_queues_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rabbitmq, "rabbitmqctl", _ctl(0, "other\t0\t0\t0\n"))
    with pytest.raises(RuntimeError, match="does not list"):
        RabbitBackend("classic").final_state(["1"])


def _listing(backend: RabbitBackend, dead: int = 0, unacked: int = 0) -> str:
    rows = [f"{name}\t{unacked}\t0\t{unacked}" for name in backend.work]
    return "\n".join([*rows, f"{backend.dead}\t{dead}\t{dead}\t0"]) + "\n"


def test_done_is_every_accepted_job_neither_dead_nor_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    # The old final_state never filled `done` for RabbitMQ, so "done without a completion"
    # could not be found there.
    backend = RabbitBackend("quorum")
    monkeypatch.setattr(rabbitmq, "rabbitmqctl", _ctl(0, _listing(backend, dead=1)))
    dead = json.dumps([{"id": "2", "last_error": "x"}])
    monkeypatch.setattr(backend, "_jobq", lambda *a: subprocess.CompletedProcess(a, 0, dead, ""))
    state = backend.final_state(["1", "2", "3"])
    assert state.done == {"1", "3"} and set(state.dead) == {"2"} and state.unfinished == 0
    assert state.problems == []


def test_the_broker_counters_are_checked_against_what_was_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = RabbitBackend("quorum")
    monkeypatch.setattr(rabbitmq, "rabbitmqctl", _ctl(0, _listing(backend, dead=2)))
    dead = json.dumps([{"id": "2", "last_error": "x"}])
    monkeypatch.setattr(backend, "_jobq", lambda *a: subprocess.CompletedProcess(a, 0, dead, ""))
    (problem,) = backend.final_state(["1", "2"]).problems
    assert "shows 1 dead, the broker counts 2" in problem


def test_a_cut_closes_only_the_connections_of_the_consumers_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The old disrupt() did nothing on RabbitMQ. rabbitmqctl's `name` is the TCP pair: the
    # consumer's pid is in the connection_name of its client_properties.
    def props(name: str) -> str:
        return f'[{{"capabilities",[]}},{{"connection_name","{name}"}},{{"product","aiormq"}}]'
    listing = "".join(f"<rabbit@h.{n}.0>\t{props(name)}\n" for n, name in enumerate(
        ["jobq consumer vm:101", "jobq publisher vm:101", "jobq consumer vm:1010", "other vm:102",
         "jobq consumer vm:102"]))
    monkeypatch.setattr(rabbitmq, "rabbitmqctl", _ctl(0, listing))
    closed: list[str] = []

    class Closer:
        def __init__(self, argv: list[str], **_: object) -> None:
            closed.append(argv[2])

        def wait(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", Closer)
    cut = RabbitBackend("quorum").disrupt({101, 102})
    assert closed == ["<rabbit@h.0.0>", "<rabbit@h.1.0>", "<rabbit@h.4.0>"]
    assert (cut.connections, cut.consumers) == (3, 2)
