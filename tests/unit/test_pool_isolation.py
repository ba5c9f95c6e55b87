"""Isolated deliveries (crash suspects: jobs in flight when a consumer died) run one at a time,
beside the other work, which goes on being received: a crash during a suspect's run names it
and no other suspect, and recovery after a crash does not stop the queue."""

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


async def test_suspects_run_one_at_a_time_beside_the_other_work() -> None:
    store = MemoryStore()
    suspects = {2, 3, 5, 8, 11, 13}
    for i in range(40):
        store.add("k", {"i": i, "suspect": i in suspects})
    log: list[str] = []
    transport = SuspectTransport(store, log)
    running: set[int] = set()
    beside: dict[int, set[int]] = {}

    async def handler(job: Job) -> None:
        i = int(job.payload["i"])
        running.add(i)
        log.append(f"start {i}")
        await asyncio.sleep(0.02)
        if job.payload["suspect"]:
            beside[i] = running - {i}
        running.discard(i)
        log.append(f"end {i}")

    stats = await pool(transport, handler).run()
    assert stats.ok == 40 and len(store.by_status("done")) == 40
    assert set(beside) == suspects
    assert all(not (others & suspects) for others in beside.values()), beside  # one at a time
    assert any(beside.values()), beside  # beside other work, not alone
    # Receiving goes on while a suspect runs (it used to stop until the suspect settled).
    windows = [log[log.index(f"start {i}"):log.index(f"end {i}")] for i in suspects]
    assert any(e.startswith("receive") for window in windows for e in window), log


async def test_a_suspect_waiting_for_its_turn_at_shutdown_is_released() -> None:
    store = MemoryStore()
    store.add("k", {"i": 0, "suspect": True})
    store.add("k", {"i": 1, "suspect": True})  # waits for the first suspect's turn to end
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
