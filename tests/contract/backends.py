"""One face for both backends in tests: run the real CLIs on a queue of its own, read the result.

``Backend`` runs ``jobq``/``producer``/``consumer`` with the backend's config file, and reads
outcomes through ``jobq dead list --json`` and ``jobq stats --json``, which answer in the same
shape on both. ``produce`` and those looks run the CLI's own parser and command in the test's
process: a process start costs more CPU than the command (tests poll the looks), and the
CLIs themselves are tested on their own. Only ``inject_malformed`` speaks to
the server directly, since no jobq path writes a bad message.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from psycopg import sql

from jobq.cli import commands
from jobq.cli.admin_args import admin_parser
from jobq.cli.main import producer_parser
from jobq.cli.running import settings_of
from tests.conftest import (
    AMQP_URL,
    PG_DSN,
    ROOT,
    cli_env,
    fetch,
    init_queue,
    run_cli,
    schema_env,
    start_cli,
)

DEFAULT_TIERS = (1, 5, 30, 300, 3600, 86400)  # configs/rabbitmq.yaml


@dataclass
class Backend:
    """A transport, a queue only this test uses, and the environment the CLIs run with."""

    transport: str
    queue: str
    env: dict[str, str]
    schema: str | None = None
    buffers: bool = True  # the pool holds received jobs beyond the running ones (consumer.buffer)
    tiers: tuple[float, ...] = DEFAULT_TIERS
    extra_tiers: set[float] = field(default_factory=set)

    def set(self, **overrides: str) -> None:
        """Set ``JOBQ_<KEY>`` overrides (``RETRY__BASE_DELAY="0.1"``) for later commands."""
        for key, value in overrides.items():
            self.env[f"JOBQ_{key}"] = value
            if key == "RABBITMQ__RETRY_TIERS":
                self.extra_tiers.update(float(x) for x in json.loads(value))

    def args(self) -> list[str]:
        """The config file and queue every command gets."""
        return ["--config", str(ROOT / "configs" / f"{self.transport}.yaml"), "--queue", self.queue]

    def argv(self, name: str, args: tuple[str, ...]) -> list[str]:
        """Arguments for ``name``: the ``jobq`` sub-command comes before the common ones."""
        if name == "jobq":
            return [args[0], *self.args(), *args[1:]]
        return [*self.args(), *args]

    def run(self, name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a CLI to completion."""
        return run_cli(name, *self.argv(name, args), env=self.env, timeout=timeout)

    def start(self, name: str, *args: str) -> subprocess.Popen[str]:
        """Start a CLI in the background."""
        return start_cli(name, *self.argv(name, args), env=self.env)

    def produce(self, count: int, *extra: str) -> None:
        """Enqueue ``count`` generated jobs with the ``producer`` command (in this process)."""
        parsed = producer_parser().parse_args(self.argv("producer", ("--count", str(count),
                                                                     *extra)))
        with contextlib.redirect_stdout(io.StringIO()):
            assert asyncio.run(commands.produce(settings_of(parsed, self.env), parsed)) == 0

    def look(self, *args: str) -> Any:
        """What ``jobq <args> --json`` prints, parsed: its parser and command in this process."""
        parsed = admin_parser().parse_args(self.argv("jobq", (*args, "--json")))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert asyncio.run(commands.admin(settings_of(parsed, self.env), parsed)) == 0
        return json.loads(out.getvalue())

    def dead(self) -> list[dict[str, Any]]:
        """The queue's dead jobs, as ``jobq dead list --json`` shows them."""
        rows: list[dict[str, Any]] = self.look("dead", "list", "--limit", "1000")
        return rows

    def depth(self) -> dict[str, Any]:
        """``jobq stats --json``."""
        depth: dict[str, Any] = self.look("stats")["depth"]
        return depth

    def waiting(self) -> int:
        """Jobs waiting to run (Postgres: pending; RabbitMQ: ready plus those in retry tiers)."""
        depth = self.depth()
        if self.transport == "postgres":
            return int(depth["pending"])
        return int(depth["ready"]) + int(depth["retry"])

    def inject_malformed(self) -> None:
        """Put one message no consumer can decode where consumers will take it: a payload
        that is not a JSON object, or on PostgreSQL, whose schema refuses that (migration 13),
        one over limits.max_payload."""
        if self.transport == "postgres":
            assert self.schema is not None
            fetch(PG_DSN, sql.SQL("INSERT INTO {} (queue, kind, payload) VALUES (%s, 'ok', %s) "
                                  "RETURNING id").format(sql.Identifier(self.schema, "jobs")),
                  [self.queue, json.dumps({"blob": "x" * 1_100_000})])
        else:
            asyncio.run(publish_raw(self.queue, b"[1, 2, 3]", message_id="4242", kind="ok"))

    def cleanup(self) -> None:
        """Delete what the test declared on RabbitMQ (Postgres schemas go with their fixture)."""
        if self.transport == "rabbitmq":
            asyncio.run(drop_topology(self.queue, (*self.tiers, *self.extra_tiers)))


async def publish_raw(queue: str, body: bytes, *, message_id: str | None, kind: str | None,
                      exchange: str = "jobq") -> None:
    """Publish bytes to a jobq queue by hand (as a foreign or broken producer would)."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        target = await channel.get_exchange(exchange)
        await target.publish(aio_pika.Message(body, message_id=message_id, type=kind,
                                              delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                             routing_key=queue)


async def drop_topology(queue: str, tiers: tuple[float, ...] = DEFAULT_TIERS) -> None:
    """Delete the queues and the dead-letter exchange jobq declares for ``queue``."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.alone", f"{queue}.paused", f"{queue}.cancelled", f"{queue}.dead",
                     *(f"{queue}.retry.{t:g}" for t in set(tiers))):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")


def rabbit_backend(queue: str) -> Backend:
    """A RabbitMQ backend on ``queue`` (topology declared by ``jobq init``)."""
    backend = Backend("rabbitmq", queue, cli_env())
    init_queue("rabbitmq", queue, backend.env)
    return backend


@contextlib.contextmanager
def backend_under_test(request: Any, queue: str, param: str, env: dict[str, str] | None = None,
                       rabbit_env: dict[str, str] | None = None) -> Iterator[Backend]:
    """``param`` ("postgres-<claim mode>" or "rabbitmq-<queue type>") on ``queue``, with the
    JOBQ_* ``env`` (and, on RabbitMQ only, ``rabbit_env``): PostgreSQL in the test's fresh
    schema, RabbitMQ declared by `jobq init` and removed afterwards. ``request``: the
    fixture's, for the ``schema`` or ``amqp_url`` fixture the backend needs."""
    transport, variant = param.split("-")
    if transport == "postgres":
        schema = request.getfixturevalue("schema")
        yield Backend("postgres", queue, schema_env(schema, JOBQ_POSTGRES__CLAIM=variant,
                                                    **(env or {})), schema=schema)
        return
    request.getfixturevalue("amqp_url")
    backend = Backend("rabbitmq", queue, schema_env(
        "unused", JOBQ_RABBITMQ__QUEUE_TYPE=variant, **(env or {}), **(rabbit_env or {})))
    try:
        init_queue("rabbitmq", queue, backend.env)
        yield backend
    finally:
        backend.cleanup()
