"""Isolated deliveries (jobs in flight when a consumer died) run with nothing else in flight."""

from __future__ import annotations

import asyncio
from typing import Any

from jobq import Job
from jobq.core.job import Delivery
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


class SuspectTransport(MemoryTransport):
    """Marks the jobs whose payload says ``suspect`` as isolated; records receives over time."""

    def __init__(self, store: MemoryStore, log: list[str]) -> None:
        super().__init__(store)
        self.log = log

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        batch = await super().receive(max_count, timeout)
        for delivery in batch:
            delivery.isolate = bool(delivery.job.payload.get("suspect"))
        if batch:
            self.log.append(f"receive {len(batch)}")
        return batch


def pool(transport: MemoryTransport, handler: Any, **kw: Any) -> WorkerPool:
    opts: dict[str, Any] = {"concurrency": 4, "buffer_size": 12, "job_timeout": 5.0,
                            "shutdown_timeout": 5.0, "poll_timeout": 0.05, "once": True}
    opts.update(kw)
    return WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False), **opts)


async def test_an_isolated_job_runs_alone_and_nothing_is_received_meanwhile() -> None:
    store = MemoryStore()
    for i in range(20):
        store.add("k", {"i": i, "suspect": i in (3, 11)})
    log: list[str] = []
    transport = SuspectTransport(store, log)
    running: set[int] = set()
    alone: dict[int, bool] = {}

    async def handler(job: Job) -> None:
        i = int(job.payload["i"])
        running.add(i)
        log.append(f"start {i}")
        await asyncio.sleep(0.01)
        if job.payload["suspect"]:
            alone[i] = running == {i}
        running.discard(i)
        log.append(f"end {i}")

    stats = await pool(transport, handler).run()
    assert stats.ok == 20 and len(store.by_status("done")) == 20
    assert alone == {3: True, 11: True}
    for i in (3, 11):  # no receive between an isolated job's start and its end
        window = log[log.index(f"start {i}"):log.index(f"end {i}")]
        assert not [e for e in window if e.startswith("receive")], window


async def test_an_isolated_job_not_yet_started_at_shutdown_is_released() -> None:
    store = MemoryStore()
    store.add("k", {"i": 0, "suspect": False})
    store.add("k", {"i": 1, "suspect": True})
    transport = SuspectTransport(store, [])
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(0.3)

    workers = pool(transport, handler, once=False)
    run = asyncio.create_task(workers.run())
    await started.wait()
    workers.stop()
    stats = await run
    assert stats.ok == 1 and stats.released == 1
    assert [e.payload["i"] for e in store.by_status("pending")] == [1]
