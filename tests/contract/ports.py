"""The five consumer backends behind one harness, for the port contract (test_port.py).

Each gives a test what the port's promises are checked with: enqueue jobs, open a consumer's
transport (a container of its own, as a consumer process has), lose one (closed with what it
was handed unsettled, as a crash leaves it for the server), cancel a job as an operator,
store a job no consumer can decode, and read the dead letters.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from jobq.api import wired
from jobq.config import Settings, load_settings
from jobq.core.attempts import AttemptError
from jobq.core.port import Admin, NewJob, Publisher, Transport
from jobq.transports.memory import MemoryPublisher, MemoryStore, MemoryTransport
from jobq.wiring.container import get_admin, get_publisher, get_transport
from jobq.wiring.derived import pool_drain_timeout
from tests.conftest import AMQP_URL, PG_DSN
from tests.contract.backends import drop_topology, publish_raw

# Short enough that a lost consumer's jobs come back within a test: a lease of 1 s, rescued
# within 0.2 s after (lease mode); transaction mode passes a lost pick over for claims.GRACE.
FAST = {"consumer.concurrency": 8, "postgres.lease": 1.0, "postgres.rescue_interval": 0.2,
        "postgres.poll_interval": 0.2,
        "retry.base_delay": 0.0, "retry.jitter": False}
BACKENDS = ("memory", "postgres-lease", "postgres-transaction", "rabbitmq-quorum",
            "rabbitmq-classic")
OVERSIZED = json.dumps({"blob": "x" * 1_100_000})  # over limits.max_payload (1 MiB)
PRIORITIES = ("memory", "postgres-lease", "postgres-transaction", "rabbitmq-classic")


@dataclass
class Port:
    """One backend under the port contract, on a queue (and schema) of its own."""

    name: str
    queue: str
    schema: str | None = None
    store: MemoryStore = field(default_factory=MemoryStore)
    _publisher: Publisher | None = None
    _admin: Admin | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def memory(self) -> bool:
        return self.name == "memory"

    def settings(self, **overrides: Any) -> Settings:
        """The backend's settings for this test's queue, ``overrides`` on top."""
        over: dict[str, Any] = {"queue": self.queue, **FAST, **overrides}
        if self.name.startswith("postgres"):
            over |= {"transport": "postgres", "postgres.dsn": PG_DSN,
                     "postgres.schema": self.schema, "postgres.claim": self.name.split("-")[1]}
        else:
            over |= {"transport": "rabbitmq", "rabbitmq.url": AMQP_URL,
                     "rabbitmq.queue_type": self.name.split("-")[1]}
            if self.name == "rabbitmq-classic":
                over["rabbitmq.max_priority"] = 9
        return load_settings(None, over, env={})

    async def __aenter__(self) -> Port:
        if not self.memory:
            container = await self._stack.enter_async_context(wired(self.settings()))
            self._admin = await get_admin(container)
            await self._admin.init()
            self._publisher = await get_publisher(container)
            await self._publisher.open()
            self._stack.push_async_callback(self._publisher.close)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        if self.name.startswith("rabbitmq"):
            await drop_topology(self.queue)

    async def enqueue(self, *jobs: NewJob) -> list[str]:
        """Enqueue ``jobs`` in order; their ids."""
        if self.memory:
            return await MemoryPublisher(self.store).enqueue_many(jobs)
        assert self._publisher is not None
        return await self._publisher.enqueue_many(jobs)

    def drain_timeout(self) -> float:
        """The pool's --once drain timeout for this backend (as the container gives it)."""
        return 0.0 if self.memory else pool_drain_timeout(self.settings())

    @contextlib.asynccontextmanager
    async def consumer(self, **overrides: Any) -> AsyncIterator[Transport]:
        """A consumer's transport, opened, in a container of its own; closed on the way out."""
        if self.memory:
            transport = MemoryTransport(self.store, queue=self.queue)
            yield transport
            await transport.close()
            return
        async with wired(self.settings(**overrides)) as container:
            transport = await get_transport(container)
            await transport.open()
            try:
                yield transport
            finally:
                await transport.close()

    async def cancel(self, job_id: str) -> None:
        """``jobq jobs cancel`` of a job."""
        if self.memory:
            self.store.entries[job_id].cancel_requested = True
            return
        assert self._admin is not None
        await self._admin.cancel_job(job_id)

    async def store_malformed(self) -> str:
        """A job no consumer can decode, written as a foreign writer would; its id. A payload
        that is not a JSON object, except on PostgreSQL, whose schema refuses one (migration
        13): there a payload over limits.max_payload, which the schema cannot see."""
        if self.memory:
            return self.store.add("k", [1, 2])
        if self.name.startswith("postgres"):
            query = sql.SQL("INSERT INTO {} (queue, kind, payload) VALUES (%s, 'k', %s) "
                            "RETURNING id").format(sql.Identifier(str(self.schema), "jobs"))
            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                row = await (await conn.execute(query, (self.queue, OVERSIZED))).fetchone()
            assert row is not None
            return str(row[0])
        await publish_raw(self.queue, b"[1, 2]", message_id="malformed-1", kind="k")
        return "malformed-1"

    async def errors(self, job_id: str) -> list[AttemptError]:
        """The job's kept history of errors, as ``jobq jobs show`` gives it."""
        if self.memory:
            return self.store.entries[job_id].errors
        assert self._admin is not None
        return list((await self._admin.show_job(job_id)).errors)

    async def dead(self) -> dict[str, str]:
        """Dead jobs: id -> reason."""
        if self.memory:
            return {e.id: str(e.last_error) for e in self.store.by_status("dead")}
        assert self._admin is not None
        return {str(d.id): str(d.last_error) for d in await self._admin.dead_list()}
