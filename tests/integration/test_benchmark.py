"""The benchmark tool end to end, tiny: every target runs, the files are written, nothing is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from benchmarks.spaces import PostgresSpace, Servers
from benchmarks.targets import DEFAULT_TARGETS
from tests.conftest import ROOT, cli_env

pytestmark = pytest.mark.integration


# 20 cases (every default target, drain and crash) start about 60 processes: some 16 s of
# CPU, whose share on a loaded machine may take minutes. The run's own deadline comes first,
# so that a run cut short still shows its output (pytest-timeout's would show nothing of it).
RUN_WITHIN = 200


@pytest.mark.slow
@pytest.mark.timeout(RUN_WITHIN + 40)
def test_quick_benchmark_writes_results_report_and_charts_for_every_target(
    pg_dsn: str, amqp_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--jobs", "300", "--scenarios",
         "drain,crash", "--drain-consumers", "1", "--out", str(out)],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=RUN_WITHIN)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]

    results = json.loads((out / "results.json").read_text())
    rows = results["summary"]
    assert {r["target"] for r in rows} == set(DEFAULT_TARGETS)  # the peers run when asked for by name
    assert all(r["lost"] == 0 and r["status"] == "ok" for r in rows), rows
    assert all(r["throughput"] > 0 for r in rows)
    crash = [r for r in rows if r["scenario"] == "crash"]
    assert crash and all(run["killed_pid"] for run in results["runs"] if run["scenario"] == "crash")

    report = (out / "report.md").read_text()
    assert all(f"| {name} |" in report for name in DEFAULT_TARGETS)
    assert "synchronous_commit" in report
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"  # latency charts: unit test


def test_a_postgres_space_says_what_its_backends_wait_for(pg_dsn: str) -> None:
    space = PostgresSpace(Servers(pg_dsn=pg_dsn))
    try:
        assert space.server_waits() == {}  # none of this case's processes is connected yet
        with psycopg.connect(pg_dsn, application_name=space.app, autocommit=True) as conn:
            conn.execute("SELECT 1")  # then idle: it waits for its client
            assert space.server_waits() == {"client": 1}
            assert len(space.server_pids()) == 1
    finally:
        space.drop()


def test_a_backend_that_does_not_answer_is_skipped_and_the_other_runs(
        amqp_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--jobs", "200", "--scenarios", "drain",
         "--targets", "postgres-lease,rabbitmq-quorum", "--no-charts", "--out", str(out)],
        cwd=ROOT, env=cli_env(JOBQ_PG_DSN="postgresql://postgres@127.0.0.1:1/test"),
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "PostgreSQL at 127.0.0.1:1 does not answer" in done.stderr
    assert "skipped postgres-lease (unreachable: postgres)" in done.stderr
    rows = json.loads((out / "results.json").read_text())["summary"]
    assert [(r["target"], r["status"], r["lost"]) for r in rows] == [("rabbitmq-quorum", "ok", 0)]


def test_the_celery_peer_drains_and_sleeps_with_nothing_lost_and_drops_what_it_declared(
        amqp_url: str, tmp_path: Path) -> None:
    # The peers extra is not part of dev: without Celery installed this test cannot run.
    pytest.importorskip("celery", reason="the peers extra is not installed "
                                         "(pip install -e '.[peers]')")
    import pika

    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--jobs", "300", "--scenarios", "drain,io",
         "--targets", "celery", "--no-charts", "--out", str(out)],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    rows = results["summary"]
    assert sorted((r["target"], r["scenario"]) for r in rows) == [("celery", "drain"), ("celery", "io")]
    assert all(r["lost"] == 0 and r["status"] == "ok" and r["throughput"] > 0 for r in rows), rows
    settings = results["runs"][0]["settings"]
    assert settings["pool"].startswith("threads") and settings["acks_late"].startswith("on")

    # Its own install and drop: the case's queue and exchange, gone afterwards.
    queue = f"celery-drop-{uuid.uuid4().hex[:8]}"

    def peer(command: str) -> None:
        step = subprocess.run([sys.executable, "-m", "benchmarks.peers.celery_peer", command,
                               "--url", amqp_url, "--queue", queue], cwd=ROOT, env=cli_env(),
                              capture_output=True, text=True, timeout=60)
        assert step.returncode == 0, step.stderr[-2000:]

    def declared() -> list[bool]:
        found = []
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        try:
            for passive in (lambda ch: ch.queue_declare(queue, passive=True),
                            lambda ch: ch.exchange_declare(queue, passive=True)):
                channel = connection.channel()
                try:
                    passive(channel)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    assert exc.reply_code == 404
                    found.append(False)
                else:
                    channel.close()
                    found.append(True)
        finally:
            connection.close()
        return found

    try:
        peer("install")
        assert declared() == [True, True]
    finally:
        peer("drop")
    assert declared() == [False, False]
