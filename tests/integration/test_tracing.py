"""OpenTelemetry (tracing.enabled) against the real servers, in one process with the SDK's
in-memory exporter: on both backends the enqueue's PRODUCER span is the parent of each job's
CONSUMER span, through the traceparent header the job carries, and the job's span records its
kind, attempt and outcome. With tracing off, OpenTelemetry is not even imported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobq.api import wired
from jobq.config import load_settings
from jobq.core.port import NewJob
from jobq.wiring.container import get_admin, get_publisher, get_transport, get_worker_pool
from tests.conftest import AMQP_URL, PG_DSN, ROOT, schema_env
from tests.contract.backends import drop_topology

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """One SDK provider for this process (OpenTelemetry takes the first one set)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture(params=["postgres", "rabbitmq"])
def settings(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Any]:
    overrides: dict[str, Any] = {
        "queue": queue_name, "tracing.enabled": True, "consumer.once": True,
        "consumer.processor": "noop", "consumer.processors": {"doomed": "fail"},
        "retry.max_attempts": 1, "event_loop": "asyncio"}
    if request.param == "postgres":
        overrides["postgres.schema"] = request.getfixturevalue("schema")
    else:
        request.getfixturevalue("amqp_url")
    config = ROOT / "configs" / f"{request.param}.yaml"
    env = {"JOBQ_PG_DSN": PG_DSN, "JOBQ_AMQP_URL": AMQP_URL}
    yield load_settings(config, overrides, env=env)
    if request.param == "rabbitmq":
        import asyncio

        asyncio.run(drop_topology(queue_name))


async def run(settings: Any) -> list[str]:
    tracer = trace.get_tracer("test")
    async with wired(settings) as container:
        await (await get_admin(container)).init()
        publisher = await get_publisher(container)
        await publisher.open()
        with tracer.start_as_current_span("request"):
            ids = await publisher.enqueue_many([NewJob(kind="mail", payload={"n": 1}),
                                                NewJob(kind="mail", payload={"n": 2}),
                                                NewJob(kind="doomed")])
        await publisher.close()
    async with wired(settings) as container:
        pool = await get_worker_pool(container)
        transport = await get_transport(container)
        await transport.open()
        try:
            await pool.run()
        finally:
            await transport.close()
    return ids


def test_the_enqueue_span_is_the_parent_of_each_jobs_span(settings: Any) -> None:
    import asyncio

    EXPORTER.clear()
    ids = asyncio.run(run(settings))
    spans = EXPORTER.get_finished_spans()
    (request,) = [s for s in spans if s.name == "request"]
    (publish,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    runs = {s.attributes["messaging.message.id"]: s for s in spans if s.kind is SpanKind.CONSUMER}
    assert publish.parent is not None and publish.parent.span_id == request.context.span_id
    assert publish.attributes["messaging.system"] == settings.transport
    assert set(runs) == set(ids)
    for job_id, span in runs.items():
        assert span.context.trace_id == request.context.trace_id
        assert span.parent is not None and span.parent.span_id == publish.context.span_id
        assert span.attributes["jobq.attempt"] == 1
        doomed = span.attributes["jobq.kind"] == "doomed"
        assert span.attributes["jobq.outcome"] == ("dead" if doomed else "ok"), job_id
        assert (span.status.status_code is StatusCode.ERROR) == doomed
    assert sorted(s.attributes["jobq.kind"] for s in runs.values()) == ["doomed", "mail", "mail"]


def test_with_tracing_off_opentelemetry_is_not_imported() -> None:
    # FastAPI (in the dev extra for examples/fastapi_shop) imports OpenTelemetry when it is
    # installed, and dependency-injector imports FastAPI when it can (its wiring supports
    # FastAPI's Depends): neither is jobq's doing, so FastAPI is kept out of this process.
    code = ("import sys, asyncio\n"
            "sys.modules['fastapi'] = None\n"
            "from jobq.config import load_settings\n"
            "from jobq.wiring.container import Container\n"
            "s = load_settings(None, {'consumer.processor': 'noop'})\n"
            "c = Container(settings=s)\n"
            "assert c.tracing() is None\n"
            "c.handler_threads()\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.replace("'", '"')) == []


def test_a_command_imports_neither_fastapi_nor_opentelemetry(schema: str) -> None:
    """dependency-injector imports FastAPI, Starlette and pydantic when installed (and FastAPI
    OpenTelemetry): a command imports it with them hidden (wiring/lean.py). Before, every
    command in a venv holding FastAPI imported them all, twice the start-up CPU of the
    container import. They stay importable afterwards, for an app's tasks that use them."""
    code = ("import sys\n"
            "from jobq.cli.main import admin_main\n"
            "code = admin_main(['stats', '-t', 'postgres', '-q', 'q', '--json'])\n"
            "print(code, *(m in sys.modules for m in ('fastapi', 'opentelemetry', 'starlette',\n"
            "                                         'pydantic')))\n"
            "import fastapi, starlette.requests, pydantic\n")
    env = {**schema_env(schema)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    # pydantic stays where dependency-injector would use it: with pydantic-settings installed
    # (the peers extra brings it), its Configuration.from_pydantic needs it.
    settings = importlib.util.find_spec("pydantic_settings") is not None
    assert done.stdout.splitlines()[-1] == f"0 False False False {settings}", done.stdout
