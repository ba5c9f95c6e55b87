"""The pool when its transport misbehaves: a receive that raises something unexpected."""

from __future__ import annotations

import pytest

from jobq import Job
from jobq.core.job import Delivery
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


class BrokenTransport(MemoryTransport):
    """Hands out one batch, then its receive raises an error that is not a TransportError."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.receives = 0
        self.handed = 0

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.receives += 1
        if self.receives > 1:
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
        batch = await super().receive(max_count, timeout)
        self.handed = len(batch)
        return batch


async def test_an_unexpected_receive_error_fails_the_run_after_settling_what_it_holds() -> None:
    store = MemoryStore()
    for i in range(3):
        store.add("k", {"i": i})
    done: list[str] = []

    async def handler(job: Job) -> None:
        done.append(job.id)

    transport = BrokenTransport(store)
    pool = WorkerPool(transport, handler, RetryPolicy(jitter=False), concurrency=1,
                      buffer_size=3, job_timeout=5.0, shutdown_timeout=5.0, poll_timeout=0.05)
    with pytest.raises(RecursionError):
        await pool.run()  # before: the fetcher died quietly and the consumer "stopped" with exit 0
    held = [e for e in store.entries.values() if e.status == "running"]
    assert held == []  # what it had received was run (or handed back), not left claimed
    assert transport.handed > 0
    assert pool.stats.ok + pool.stats.released == transport.handed
    assert sum(e.status == "pending" for e in store.entries.values()) == 3 - transport.handed
