"""The benchmark's command line: lists of numbers are checked before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.run import main, parser


def test_rates_and_consumer_counts_parse_into_tuples() -> None:
    args = parser().parse_args(["--rates", "300,1000.5", "--drain-consumers", "1,2"])
    assert args.rates == (300.0, 1000.5) and args.drain_consumers == (1, 2)


@pytest.mark.parametrize(("argv", "message"), [
    (["--rates", "fast"], "argument --rates: expected comma-separated numbers, got 'fast'"),
    (["--rates", "300,0"], "argument --rates: every value must be > 0, got '300,0'"),
    (["--drain-consumers", "1.5"], "argument --drain-consumers: expected comma-separated numbers"),
])
def test_bad_lists_are_refused_with_the_option_named(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_used_result_directory_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another run's completion records under runs/ would be counted with this run's.
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as stop:
        main(["--out", str(tmp_path), "--quick"])
    assert stop.value.code == 2 and f"--out {tmp_path} is not empty" in capsys.readouterr().err


def test_the_peers_are_asked_for_by_name_and_reported_beside_jobq() -> None:
    from benchmarks.report import peer_lines
    from benchmarks.targets import DEFAULT_TARGETS, PEERS, TARGETS

    assert set(PEERS) == {"pgqueuer", "procrastinate", "dramatiq", "celery"}
    assert not set(PEERS) & set(DEFAULT_TARGETS)  # make demo and the default run need no extra
    assert parser().parse_args([]).targets == ",".join(DEFAULT_TARGETS)
    assert all(TARGETS[p].cannot for p in PEERS)  # what they do not run is said, with why

    def row(target: str, scenario: str, variant: str, jobs_s: float, p99: float = 0) -> dict:
        return {"target": target, "scenario": scenario, "variant": variant,
                "throughput": jobs_s, "latency_ms": {"p99": p99} if p99 else {}}

    rows = [row("pgqueuer", "drain", "x1", 2_000), row("postgres-lease", "drain", "x1", 20_000),
            row("pgqueuer", "latency", "1000/s", 1_000, 12.0),
            row("postgres-lease", "latency", "1000/s", 1_000, 6.0)]
    targets = {"pgqueuer": {"family": "peer", "backend": "postgres",
                            "not_run": {"crash": "its own way"}},
               "postgres-lease": {"family": "jobq", "backend": "postgres"}}
    lines = "\n".join(peer_lines(rows, targets))  # type: ignore[arg-type]
    assert "| drain x1 | pgqueuer | 2,000 jobs/s | 20,000 jobs/s (postgres-lease) | 10.00x |" in lines
    assert "p99 12.0 ms | p99 6.0 ms (postgres-lease) | 2.00x" in lines
    assert "pgqueuer does not run **crash**: its own way" in lines


@pytest.mark.parametrize("peer", ["pgqueuer", "celery"])
def test_a_peer_whose_library_is_missing_is_named_and_fails_the_run(
        peer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == peer else real(name, *a))
    assert main(["--targets", peer, "--out", str(tmp_path / "out")]) == 1
    assert f"{peer} is not installed (pip install -e '.[peers]')" in capsys.readouterr().err


def test_peers_expands_to_every_peer_celery_included_each_on_its_own_module() -> None:
    from benchmarks.run import chosen
    from benchmarks.spaces import PeerRabbitSpace, Servers
    from benchmarks.targets import PEER_SCENARIOS, PEERS, TARGETS, Launch, Work

    present, absent = chosen("peers")  # those not installed here are named and left out
    assert sorted(t.name for t in present + absent) == sorted(PEERS) and "celery" in PEERS
    celery = TARGETS["celery"]
    assert (celery.backend, celery.family, celery.baseline, celery.module) == (
        "rabbitmq", "peer", "raw-pika-classic", "celery")
    assert celery.baseline in TARGETS and celery.scenarios == PEER_SCENARIOS and celery.cannot
    space = celery.make_space(Servers())
    assert isinstance(space, PeerRabbitSpace) and space.peer == "celery"
    argv = celery.consumer(celery, space, Launch(record_dir=Path("/r"), work=Work(sleep_ms=10),
                                                 concurrency=100, once=True))
    assert argv[1:4] == ["-m", "benchmarks.peers.celery_peer", "consume"]
    assert argv[argv.index("--concurrency"):][:2] == ["--concurrency", "100"] and "--once" in argv
    assert argv[argv.index("--sleep-ms"):][:2] == ["--sleep-ms", "10"]
    assert celery.producer is not None
    assert celery.producer(celery, space, 50, 1000.0)[1:4] == ["-m", "benchmarks.peers.celery_peer",
                                                               "produce"]
    root = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"
    assert all((root / f"{name}_peer.py").is_file() for name in PEERS)


def test_each_peer_states_its_settings_celery_its_pool_prefetch_and_acks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from benchmarks.spaces import Servers
    from benchmarks.targets import PEERS, TARGETS

    # The version is read from the installed library: stubbed, the peers extra is not in dev.
    monkeypatch.setattr(importlib.metadata, "version", lambda name: f"{name}-version")
    for name in PEERS:
        t = TARGETS[name]
        assert t.describe_settings(t.make_space(Servers()), 32)["version"] == f"{t.module}-version"
    celery = TARGETS["celery"].describe_settings(TARGETS["celery"].make_space(Servers()), 32)
    assert celery["pool"].startswith("threads") and celery["concurrency"] == 32
    assert celery["prefetch"].startswith("128 (worker_prefetch_multiplier 4")
    assert celery["acks_late"].startswith("on") and "kombu" in celery["broker"]
    assert celery["enqueue"] == "apply_async, one message each"
