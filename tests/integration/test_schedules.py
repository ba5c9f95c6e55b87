"""Schedules: three consumers enqueue each tick once; a tick missed while nothing ran, once."""

from __future__ import annotations

import asyncio
import collections
import itertools
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import aio_pika
import pytest

from tests.conftest import AMQP_URL, cli_env, schema_env, stop_cli, wait_until
from tests.contract.backends import Backend
from tests.processors import ticks

EVERY = 2.0
SCHEDULE = {"JOBQ_SCHEDULES__BEAT__EVERY": f"{EVERY:g}s", "JOBQ_SCHEDULES__BEAT__KIND": "beat"}


@pytest.fixture(params=["postgres", "rabbitmq"])
def scheduled(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    """A backend whose config schedules ``beat`` every 2 s on a queue of its own."""
    if request.param == "postgres":
        schema = request.getfixturevalue("schema")
        yield Backend("postgres", queue_name, schema_env(schema, **SCHEDULE), schema=schema)
        return
    request.getfixturevalue("amqp_url")
    backend = Backend("rabbitmq", queue_name, cli_env(**SCHEDULE))
    assert backend.run("jobq", "init").returncode == 0
    try:
        yield backend
    finally:
        backend.cleanup()
        asyncio.run(_drop(f"{queue_name}.schedules"))


async def _drop(name: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(name)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Consumers the test starts; any still running at the end (a failed stop) are killed."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def consumers(backend: Backend, directory: Path, count: int,
              started: list[subprocess.Popen[str]]) -> list[subprocess.Popen[str]]:
    new = [backend.start("consumer", "--processor", "tests.processors:tick_record",
                         "-a", f"directory={directory}") for _ in range(count)]
    started.extend(new)
    return new


@pytest.mark.slow
def test_three_consumers_enqueue_each_tick_once_and_a_missed_tick_once(
        scheduled: Backend, tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    running = consumers(scheduled, tmp_path, 3, started)
    try:
        assert wait_until(lambda: len(ticks(tmp_path)) >= 3, 20), ticks(tmp_path)
    finally:
        for consumer in running:
            stop_cli(consumer, 20)
    before = ticks(tmp_path)
    per_tick = collections.Counter(tick for _, tick, _ in before)
    assert all(n == 1 for n in per_tick.values()), per_tick  # never twice, three consumers
    stamps = sorted(datetime.fromisoformat(t).timestamp() for t in per_tick)
    assert all(b - a == EVERY for a, b in itertools.pairwise(stamps)), stamps  # none skipped

    time.sleep(3 * EVERY)  # nothing runs: three ticks pass
    restarted = time.time()
    (again,) = consumers(scheduled, tmp_path, 1, started)
    try:
        assert wait_until(lambda: len(ticks(tmp_path)) > len(before), 10)
        time.sleep(0.3)
    finally:
        stop_cli(again, 20)
    new = collections.Counter(datetime.fromisoformat(t).timestamp()
                              for _, t, _ in set(ticks(tmp_path)) - set(before))
    assert all(n == 1 for n in new.values()), new
    resumed = sorted(new)
    # Three ticks or more passed while nothing ran: they were enqueued as one, the latest at
    # the restart (its start-up took a moment), and the ticks after it each once.
    assert resumed[0] >= stamps[-1] + 3 * EVERY and resumed[0] >= restarted - EVERY, (stamps, resumed)
    assert all(b - a == EVERY for a, b in itertools.pairwise(resumed)), resumed
    assert {s for s, _, _ in ticks(tmp_path)} == {"beat"}
