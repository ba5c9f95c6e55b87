"""``transport: memory`` in a config: accepted for an app and its tests, refused by commands."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobq
import jobq.testing
from jobq.api import wired
from jobq.cli.main import admin_main, consumer_main, producer_main
from jobq.config import load_settings
from jobq.core.errors import ConfigError
from jobq.core.port import NewJob
from jobq.wiring.container import get_admin, get_publisher, get_worker_pool


@dataclass
class Ping:
    n: int


@pytest.fixture
def memory_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "memory.yaml"
    path.write_text("transport: memory\nqueue: tests\nretry:\n  max_attempts: 2\n")
    return path


async def test_an_app_on_memory_enqueues_without_a_server_and_its_test_drains_it(
        memory_yaml: Path) -> None:
    app = jobq.App(str(memory_yaml))
    seen: list[int] = []

    @app.task
    async def ping(args: Ping, ctx: jobq.Context) -> None:
        seen.append(args.n)

    async with app:  # as a web app's lifespan would open it: nothing to connect
        await ping.enqueue(Ping(1))  # before the test's worker: a request handled, say
        async with jobq.testing.worker(app) as worker:
            worker.assert_enqueued(ping, Ping(1))
            await ping.enqueue(Ping(2))
            stats = await worker.drain()
    assert sorted(seen) == [1, 2] and stats.ok == 2


async def test_the_container_wires_memory_as_it_wires_a_server(memory_yaml: Path) -> None:
    settings = load_settings(str(memory_yaml), {"consumer.once": True,
                                                "consumer.processor": "noop"})
    async with wired(settings) as container:
        publisher = await get_publisher(container)
        await publisher.enqueue(NewJob(kind="k"))
        await publisher.enqueue(NewJob(kind="k", max_attempts=1))
        pool = await get_worker_pool(container)
        stats = await asyncio.wait_for(pool.run(), 20)
        assert stats.ok == 2
        with pytest.raises(ConfigError, match="has no admin") as refused:
            await get_admin(container)
        assert refused.value.key == "transport"


@pytest.mark.parametrize("main", [consumer_main, producer_main, admin_main])
def test_a_command_refuses_memory_naming_the_key(main: object, memory_yaml: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--config", str(memory_yaml)]
    if main is admin_main:
        argv = ["stats", *argv]
    elif main is producer_main:
        argv = [*argv, "--count", "1"]
    assert callable(main)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "transport" in err and "keeps jobs inside one Python process" in err, err
