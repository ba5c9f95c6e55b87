"""consumer.max_jobs_per_process: one budget for every pool of the process (worker/budget.py).

A reviewer found that with reservations an idle queue, waiting for jobs, held the budget back:
the busy queue stopped short and the idle one polled for ever, so the process never recycled.
This fails on that code (the run times out).
"""

from __future__ import annotations

import asyncio
from typing import Any

from jobq import Job
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.budget import JobBudget
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


def pool(store: MemoryStore) -> WorkerPool:
    async def handler(job: Job) -> None:
        await asyncio.sleep(0.001)

    opts: dict[str, Any] = {"concurrency": 4, "buffer_size": 4, "job_timeout": 5.0,
                            "shutdown_timeout": 5.0, "poll_timeout": 0.2}
    return WorkerPool(MemoryTransport(store), handler, RetryPolicy(base_delay=0.0), **opts)


async def test_a_busy_and_an_idle_queue_share_the_budget_and_both_stop() -> None:
    busy, idle = MemoryStore(), MemoryStore()
    for i in range(50):
        busy.add("k", {"i": i})
    budget = JobBudget(20)
    pools = [pool(busy), pool(idle)]
    for each in pools:
        each.limit_to(budget)
    stats = await asyncio.wait_for(asyncio.gather(*(p.run() for p in pools)), 10)
    assert stats[0].ok == 20 and stats[1].ok == 0 and stats[0].released == 0
    assert len(busy.by_status("done")) == 20 and len(busy.by_status("pending")) == 30


async def test_one_pool_takes_exactly_the_budget() -> None:
    store = MemoryStore()
    for i in range(30):
        store.add("k", {"i": i})
    budget = JobBudget(7)
    workers = pool(store)
    workers.limit_to(budget)
    stats = await asyncio.wait_for(workers.run(), 10)
    assert stats.ok == 7 and stats.released == 0 and budget.spent
