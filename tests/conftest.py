"""Shared fixtures. Service-backed tests FAIL (never skip) when CI is set and a server is down."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from tests import forkserver
from tests.faultproxy import FaultProxy

PG_DSN = os.environ.get("JOBQ_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
AMQP_URL = os.environ.get("JOBQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
IN_CI = bool(os.environ.get("CI"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first, the rest in their order: spread over the workers
    from the start, the longest cannot be the last to begin and end the run seconds after
    every other worker is idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _tcp_up(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def need_service(name: str, host: str, port: int) -> None:
    """Fail under CI, skip elsewhere, when a server the test needs does not answer."""
    if _tcp_up(host, port):
        return
    message = f"{name} on {host}:{port} does not answer"
    if IN_CI:
        pytest.fail(message + " (CI is set: service tests must not be skipped)")
    pytest.skip(message)


def need_tool(name: str, package: str) -> str:
    """The path of a command-line tool; fail under CI, skip elsewhere, when it is missing."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} is not installed (apt-get install {package})"
    if IN_CI:
        pytest.fail(message + " (CI is set: .ci/run installs it)")
    pytest.skip(message)


@pytest.fixture
def pg_dsn() -> str:
    """The test PostgreSQL DSN, checked reachable."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_DSN


@pytest.fixture
def amqp_url() -> str:
    """The test RabbitMQ URL, checked reachable."""
    need_service("RabbitMQ", "127.0.0.1", 5672)
    return AMQP_URL


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str, int], FaultProxy]]:
    """Make fault-injection proxies (``make(host, port)``); every one stops with the test."""
    proxies: list[FaultProxy] = []

    def make(host: str, port: int) -> FaultProxy:
        proxy = FaultProxy(host, port).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()


@pytest.fixture
def pg_proxy(pg_dsn: str, fault_proxy: Callable[[str, int], FaultProxy]) -> FaultProxy:
    """A fault proxy in front of the test PostgreSQL (point a DSN at it with ``via_proxy``)."""
    info = conninfo.conninfo_to_dict(pg_dsn)
    return fault_proxy(str(info.get("host") or "127.0.0.1"), int(str(info.get("port") or 5432)))


def via_proxy(dsn: str, proxy: FaultProxy, **params: str) -> str:
    """``dsn`` with its host and port replaced by the proxy's (and ``params`` added)."""
    return conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port), **params)


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A fresh jobq schema (initialised), dropped afterwards: tests never share tables."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    init_queue("postgres", "q", schema_env(name))
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def init_queue(transport: str, queue: str, env: dict[str, str]) -> None:
    """What ``jobq init --config configs/<transport>.yaml --queue <queue>`` does (the schema's
    migrations, or the RabbitMQ topology), with the JOBQ_* settings of ``env``, done in this
    process: a fixture saves a CLI start per test. The CLI's own init has tests of its own
    (test_postgres, test_rabbitmq, test_pause). On a thread with a loop of its own, so that
    it neither needs nor disturbs the test's event loop."""
    from jobq.config import load_settings
    from jobq.wiring.container import admin_of

    settings = load_settings(ROOT / "configs" / f"{transport}.yaml",
                             {"queue": queue, "connect.attempts": 1}, env=env)

    async def init() -> None:
        async with admin_of(settings) as admin:
            await admin.init()

    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, init()).result(timeout=120)


@pytest.fixture
def queue_name() -> str:
    """A queue name unique to the test."""
    return f"q-{uuid.uuid4().hex[:10]}"


def pg_args(queue: str) -> list[str]:
    """CLI arguments for the Postgres config and ``queue`` (DSN and schema come by environment)."""
    return ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", queue]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess (extra keys are JOBQ_* overrides)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    env["JOBQ_PG_DSN"] = PG_DSN
    env["JOBQ_AMQP_URL"] = AMQP_URL
    env["PYTHONPATH"] = str(ROOT)  # so `--processor tests.processors:...` imports
    # A CLI a test finds hung gets SIGABRT (tests/scrape.py): every thread's stack on stderr,
    # even with its event loop blocked, where jobq's own SIGUSR1 dump would never run.
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra)
    return env


def command(name: str) -> str:
    """Path of an installed console script."""
    return str(BIN / name)


# This process's commands are forked from a server that has imported jobq already
# (tests/forkserver.py), unless JOBQ_TESTS_EXEC=1 has each exec'd as a new Python process.
FORKS = None if os.environ.get("JOBQ_TESTS_EXEC") == "1" else forkserver.ForkServer(cli_env())


def run_cli(name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
            ) -> subprocess.CompletedProcess[str]:
    """Run ``consumer``/``producer``/``jobq`` to completion."""
    return forkserver.run(FORKS, [command(name), *args], env or cli_env(), timeout)


def start_cli(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``consumer``/``producer``/``jobq`` in the background."""
    return forkserver.popen(FORKS, [command(name), *args], env or cli_env())


class Stderr:
    """A started CLI's stderr, read line by line on a thread of its own (so the pipe never
    fills), kept for the test to wait on and to read. The reader owns the pipe from then on:
    ``proc.stderr`` becomes None, so a later ``communicate`` or ``with proc`` reads stdout
    only and cannot close the pipe under the reader."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None, "stderr is not a pipe, or another reader owns it"
        self.proc = proc
        self._pipe, proc.stderr = proc.stderr, None
        self.lines: list[str] = []
        self._more = threading.Condition()
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with self._pipe:
            for line in self._pipe:
                with self._more:
                    self.lines.append(line)
                    self._more.notify_all()
        with self._more:
            self._ended = True
            self._more.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> str:
        """The first line matching ``pattern`` (a regex), once written; AssertionError, with
        every line so far, if the CLI ends or ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        with self._more:
            while True:
                found = next((line for line in self.lines if re.search(pattern, line)), None)
                left = deadline - time.monotonic()
                if found is not None:
                    return found
                if self._ended or left <= 0:
                    raise AssertionError(f"no line matching {pattern!r} within {timeout:g}s:\n"
                                         + "".join(self.lines))
                self._more.wait(left)

    def text(self) -> str:
        """Everything read, the rest included once the CLI has ended."""
        if self.proc.poll() is not None:
            with self._more:
                self._more.wait_for(lambda: self._ended, 10)
        return "".join(self.lines)


def consuming(proc: subprocess.Popen[str], timeout: float = 60) -> Stderr:
    """Once a started consumer says it is consuming (its transport open, its workers about
    to ask for jobs): its stderr, read from now on by the returned reader."""
    err = Stderr(proc)
    err.wait_for(r"consuming queue ", timeout)
    return err


def schema_env(schema: str, **extra: str) -> dict[str, str]:
    """cli_env() pointing the Postgres transport at ``schema``."""
    return cli_env(JOBQ_POSTGRES__SCHEMA=schema, **extra)


def fetch(dsn: str, query: str | sql.Composable, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
    """Run one query and return its rows (test-side checks)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def stop_cli(proc: subprocess.Popen[str], timeout: float) -> float:
    """SIGTERM a CLI; the seconds it took to exit (killed, and the test failed, past ``timeout``)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the consumer did not stop within {timeout:g}s of SIGTERM")
    return time.monotonic() - started


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.05) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` seconds pass; return whether it was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


async def until(predicate: Callable[[], object], what: str, timeout: float = 5.0,
                step: float = 0.005) -> None:
    """Yield to the loop until ``predicate()`` is truthy; fail naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(step)


def jobs_table(schema: str) -> sql.Composed:
    """``<schema>.jobs``, quoted."""
    return sql.SQL("{}.jobs").format(sql.Identifier(schema))


@pytest.fixture
async def pg_publisher(pg_dsn: str, schema: str, queue_name: str) -> AsyncIterator[Any]:
    """A PostgresPublisher on the test's schema and queue, with a pool of 4 of its own."""
    import logging

    from jobq.config import ConnectConfig, PostgresConfig
    from jobq.transports.postgres.connect import open_pool
    from jobq.transports.postgres.publisher import PostgresPublisher

    pool = await open_pool(pg_dsn, ConnectConfig(), 4, logging.getLogger("jobq.test"),
                           network_timeout=5.0)
    try:
        yield PostgresPublisher(pool, PostgresConfig(dsn=pg_dsn, schema=schema), queue=queue_name,
                                max_attempts=3)
    finally:
        await pool.close()
