"""Tasks on the real backends: enqueued typed by the app, run by ``consumer -A module:app``."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tasks_app
from tests.conftest import ROOT, cli_env, command, consuming, schema_env, wait_until
from tests.contract.backends import Backend, backend_under_test


@pytest.fixture(params=["postgres-lease", "postgres-transaction", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, request.param,
                            {"JOBQ_RETRY__BASE_DELAY": "0"}) as backend:
        yield backend


def records(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def events(directory: Path, event: str) -> list[dict[str, object]]:
    return [r for r in records(directory) if r["event"] == event]


def ran(directory: Path) -> list[dict[str, object]]:
    return [r for r in records(directory) if r["event"] in ("sent", "archived")]


def test_typed_tasks_run_by_kind_and_a_failing_one_ends_dead_after_its_own_retries(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in backend.env.items():
        if name.startswith("JOBQ_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("JOBQ_CONFIG", str(ROOT / "configs" / f"{backend.transport}.yaml"))

    async def enqueue() -> None:
        async with tasks_app.app:
            for order_id in (1, 2, -1):
                await tasks_app.send_receipt.enqueue(tasks_app.Receipt(order_id, "a@example.com"),
                                                     queue=backend.queue)
            await tasks_app.archive_receipt.enqueue(tasks_app.Receipt(3, "b@example.com"),
                                                    queue=backend.queue)
            await tasks_app.slow.enqueue(tasks_app.Receipt(4, "c@example.com"),
                                         queue=backend.queue)

    asyncio.run(enqueue())
    backend.env["JOBQ_TEST_RECORD"] = str(tmp_path)
    consumer = backend.start("consumer", "-A", "tests.tasks_app:app")
    try:
        stderr = consuming(consumer)
        assert "(concurrency 32, app tests.tasks_app:app)" in stderr.text()
        stderr.wait_for(r"job \S+ \(send_receipt\) attempt 3/3 dead after", 30)
        stderr.wait_for(r"job \S+ \(slow\) attempt 1/1 dead after", 30)
        assert wait_until(lambda: len(ran(tmp_path)) == 3, 30), records(tmp_path)
        assert wait_until(lambda: len(events(tmp_path, "failure")) == 4, 30), records(tmp_path)
        assert wait_until(lambda: len(events(tmp_path, "settled")) == 7, 30), records(tmp_path)
    finally:
        consumer.send_signal(signal.SIGTERM)
        assert consumer.wait(timeout=30) == 0, stderr.text()
    done = sorted((r["kind"], r["order_id"], r["event"]) for r in ran(tmp_path))
    assert done == [("receipt.archive", 3, "archived"), ("send_receipt", 1, "sent"),
                    ("send_receipt", 2, "sent")]
    # The hooks: start-up once before the jobs (whose ctx.state it filled), shutdown once
    # after them, a failure hook per failed attempt with the worker's decision.
    (start,), (end,) = events(tmp_path, "startup"), events(tmp_path, "shutdown")
    assert records(tmp_path)[0] == start and records(tmp_path)[-1] == end
    assert {r["opened"] for r in ran(tmp_path)} == {end["opened"]} == {consumer.pid}
    failing = [r for r in events(tmp_path, "failure") if r["id"] != slow_id(tmp_path)]
    assert [(r["attempt"], r["outcome"]) for r in failing] == \
        [(1, "retried"), (2, "retried"), (3, "dead")]
    assert all(r["error"] == "RuntimeError('no order -1')" for r in failing)
    dead = {row["kind"]: row for row in backend.dead()}
    assert sorted(dead) == ["send_receipt", "slow"], dead
    assert dead["send_receipt"]["attempts"] == 3
    assert dead["send_receipt"]["last_error"] == \
        "RuntimeError: no order -1 (gave up after 3 of 3 attempts)"
    # The task's own timeout: cancelled at 0.3 s, its one attempt failed, dead (retries=0).
    assert dead["slow"]["last_error"] == ("JobTimeout: task 'slow' ran past its timeout of "
                                          "0.3s (gave up after 1 of 1 attempts)")
    # The middleware: around every run (its context seen by the task, a plain def's thread
    # included; its record after each attempt, however it ended), and after each decision.
    assert all(r["around"] == f"stamped {r['id']}" for r in ran(tmp_path)), ran(tmp_path)
    assert sorted(r["ended"] for r in events(tmp_path, "after")) == ["raised"] * 4 + \
        ["returned"] * 3
    assert sorted(r["outcome"] for r in events(tmp_path, "settled")) == \
        ["dead", "dead", "ok", "ok", "ok", "retried", "retried"]


def slow_id(directory: Path) -> object:
    (slow,) = [r for r in events(directory, "failure") if "JobTimeout" in str(r["error"])]
    return slow["id"]


def test_consumer_imports_an_app_or_a_processor_from_the_current_directory(
        tmp_path: Path, schema: str) -> None:
    (tmp_path / "shop_tasks.py").write_text(
        "import jobq\n\napp = jobq.App()\n\n\ndef handle(job):\n    pass\n")
    env = cli_env(JOBQ_POSTGRES__SCHEMA=schema)
    env.pop("PYTHONPATH")
    for flag, spec in (("-A", "shop_tasks:app"), ("-p", "shop_tasks:handle")):
        result = run_cli_in(tmp_path, flag, spec, env)
        assert result.returncode == 0, result.stderr
    result = run_cli_in(tmp_path, "-A", "shop_tasks:handle", env)
    assert result.returncode == 2
    assert "consumer.app: 'shop_tasks:handle' is not a jobq.App" in result.stderr


def run_cli_in(directory: Path, flag: str, spec: str,
               env: dict[str, str]) -> subprocess.CompletedProcess[str]:

    return subprocess.run([command("consumer"), "--config", str(ROOT / "configs" / "postgres.yaml"),
                           "--queue", "q", "--once", flag, spec], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=60)



def test_a_tasks_unique_key_and_delay_reach_postgres(schema: str, queue_name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    backend = Backend("postgres", queue_name, schema_env(schema), schema=schema)
    for name, value in backend.env.items():
        if name.startswith("JOBQ_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("JOBQ_CONFIG", str(ROOT / "configs" / "postgres.yaml"))

    async def enqueue() -> list[str]:
        async with tasks_app.app:
            return [await tasks_app.report_later.enqueue(tasks_app.Receipt(order_id, "a@b"),
                                                         queue=queue_name)
                    for order_id in (7, 7, 8)]

    first, again, other = asyncio.run(enqueue())
    assert first == again != other  # the same key while the first waits: its id back
    waiting = json.loads(backend.run("jobq", "jobs", "list", "--json").stdout)
    assert sorted((row["key"], row["kind"]) for row in waiting) == [
        ("report-7", "report_later"), ("report-8", "report_later")]
    assert all(row["run_at"] > row["created_at"] for row in waiting)  # the task's delay
