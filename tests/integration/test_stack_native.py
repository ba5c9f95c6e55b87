"""`make stack` (tools/stack/): the compose stack's commands run natively on the local
servers, scraped by the real Prometheus with the stack's scrape config, and every Grafana
dashboard query evaluated by it; the stack stops by itself or on Ctrl-C and removes what it
created."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
import uuid
from typing import Any

import aio_pika
import pytest

from tests.conftest import AMQP_URL, PG_DSN, ROOT, cli_env, fetch, need_tool
from tests.scrape import get, scrape, value, wait_for
from tools.stack.cleanup import broker_names, drop_rabbit, owned

pytestmark = pytest.mark.integration
DASHBOARD = ROOT / "compose" / "grafana" / "dashboards" / "jobq.json"
# The transports the native stack runs here. Add "rabbitmq" once transports/rabbitmq.py and its
# `rabbitmq=` providers in container.py have landed: nothing else in this file changes.
TRANSPORTS = ("postgres", "rabbitmq")


class StackRun:
    """``python -m tools.stack`` in the background, its output collected."""

    def __init__(self, *args: str) -> None:
        env = cli_env()
        env.update({"JOBQ_PG_DSN": PG_DSN, "JOBQ_AMQP_URL": AMQP_URL})
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.stack", *args], cwd=ROOT,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def ready(self, timeout: float = 60) -> dict[str, Any]:
        """The STACK READY announcement."""
        wait_for(lambda: any(line.startswith("STACK READY ") for line in self.lines)
                 or self.proc.poll() is not None, timeout, "STACK READY")
        found = [line for line in self.lines if line.startswith("STACK READY ")]
        assert found, "the stack did not come up:\n" + self.output
        info: dict[str, Any] = json.loads(found[0].removeprefix("STACK READY "))
        return info

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the stack did not stop in time:\n" + self.output) from None

    @property
    def output(self) -> str:
        return "".join(self.lines)


def leftovers(info: dict[str, Any]) -> list[str]:
    """What the run left on the servers: its schema, and queues/exchanges named after it."""
    left = [info["schema"]] if fetch(PG_DSN, "SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                     (info["schema"],)) else []
    if "rabbitmq" in TRANSPORTS:
        left += owned(broker_names("queues") + broker_names("exchanges"), info["queue"])
    return left


def transport_args() -> list[str]:
    return [arg for t in TRANSPORTS for arg in ("--transport", t)]


def promql(base: str, expr: str) -> list[Any]:
    """Evaluate ``expr`` on Prometheus; the result vector (errors fail the test)."""
    status, body = get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", f"{expr}: {body}"
    result: list[Any] = answer["data"]["result"]
    return result


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) with Grafana's $__rate_interval given a value Prometheus accepts."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], re.sub(r"\$__rate_interval", "1m", t["expr"]))
            for p in panels for t in p["targets"]]


@pytest.mark.slow
def test_stack_is_scraped_and_every_dashboard_query_answers(pg_dsn: str) -> None:
    need_tool("prometheus", "prometheus")
    stack = StackRun(*transport_args(), "--seconds", "60", "--summary", "2", "--grace", "10")
    try:
        info = stack.ready()
        assert sorted(info["consumers"]) == sorted(f"consumer-{t}-1" for t in TRANSPORTS)
        for transport in TRANSPORTS:
            base = info["consumers"][f"consumer-{transport}-1"]
            labels = {"transport": transport, "queue": info["queue"]}
            assert get(f"{base}/readyz")[0] == 200 and get(f"{base}/healthz")[0] == 200
            wait_for(lambda b=base, ls=labels: (value(scrape(b), "jobq_jobs_total", outcome="ok",
                                                      **ls) or 0) > 100,
                     20, f"consumer-{transport} to work through the producer's jobs")
        prometheus = info["prometheus"]

        def targets_up() -> bool:
            up = promql(prometheus, 'up{job=~"consumer-.*"}')
            return sorted(s["metric"]["job"] for s in up if s["value"][1] == "1") == sorted(
                f"consumer-{t}" for t in TRANSPORTS)

        wait_for(targets_up, 20, "Prometheus to scrape every consumer")
        queries = dashboard_queries()

        def all_answer() -> bool:
            return all(promql(prometheus, expr) for _, expr in queries)

        wait_for(all_answer, 20, "every dashboard query to return data", interval=1)
        for title, expr in queries:
            series = promql(prometheus, expr)
            assert {s["metric"].get("transport", TRANSPORTS[0]) for s in series} <= set(
                TRANSPORTS), title
    finally:
        stack.proc.send_signal(signal.SIGINT)  # what Ctrl-C in `make stack` sends
        code = stack.wait(30)
    assert code == 0, stack.output
    assert "consumers exited {" in stack.output
    assert leftovers(info) == []


def test_stack_stops_by_itself_and_cleans_up(pg_dsn: str) -> None:
    stack = StackRun(*transport_args(), "--seconds", "2", "--prometheus-port", "-1",
                     "--grace", "10")
    info = stack.ready()
    assert stack.wait(30) == 0, stack.output
    exited = {f"consumer-{t}-1": 0 for t in TRANSPORTS}
    assert f"consumers exited {exited}" in stack.output
    assert leftovers(info) == []


async def _declare(url: str, queues: list[str], exchanges: list[str]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for name in queues:
            await channel.declare_queue(name, auto_delete=False)
        for name in exchanges:
            await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT)


async def _exists(url: str, queue: str) -> bool:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelClosed:
            return False
        return True


def test_rabbit_cleanup_removes_only_the_runs_names(amqp_url: str) -> None:
    need_tool("rabbitmqctl", "rabbitmq-server")
    prefix = f"stack-{uuid.uuid4().hex[:8]}"
    decoy = prefix + "x"  # shares the prefix but is not ours
    asyncio.run(_declare(amqp_url, [prefix, f"{prefix}.dead", f"{prefix}.retry.1", decoy],
                         [prefix, f"{prefix}.dlx"]))
    try:
        removed = drop_rabbit(amqp_url, prefix)
        assert sorted(removed) == sorted([prefix, f"{prefix}.dead", f"{prefix}.retry.1",
                                          prefix, f"{prefix}.dlx"])
        assert not asyncio.run(_exists(amqp_url, prefix))
        assert asyncio.run(_exists(amqp_url, decoy))
    finally:
        drop_rabbit(amqp_url, decoy)
    assert not asyncio.run(_exists(amqp_url, decoy))
