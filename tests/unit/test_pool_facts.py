"""Facts a transport reports about a delivery: the pool alone decides what they mean, and never
runs such a job (its attempts spent, or cancelled before it started)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jobq import Job
from jobq.core.job import CancelRequested, Delivery, Spent
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until

SPENT = "attempt 7 is over max_attempts 5 (header x-jobq-attempt)"


class Noting(MemoryTransport):
    """Reports a fact for the jobs whose payload names one, as a backend's decoder would."""

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        batch = await super().receive(max_count, timeout)
        for delivery in batch:
            fact = delivery.job.payload.get("fact")
            if fact == "spent":
                delivery.fact = Spent(SPENT)
            elif fact == "cancelled":
                delivery.fact = CancelRequested()
        return batch


def pool(transport: MemoryTransport, handler: Callable[[Job], object], **kw: object) -> WorkerPool:
    async def handle(job: Job) -> None:
        result = handler(job)
        if asyncio.iscoroutine(result):
            await result

    opts: dict[str, object] = {"concurrency": 2, "buffer_size": 4, "job_timeout": 5.0,
                               "shutdown_timeout": 5.0, "poll_timeout": 0.05, "once": True}
    opts.update(kw)
    return WorkerPool(transport, handle, RetryPolicy(base_delay=0.0, jitter=False),
                      **opts)  # type: ignore[arg-type]


async def test_a_fact_is_decided_by_the_pool_and_its_job_never_runs() -> None:
    store = MemoryStore()
    plain = [store.add("k", {"n": n}) for n in range(3)]
    spent = store.add("k", {"fact": "spent"})
    cancelled = store.add("k", {"fact": "cancelled"})
    ran: list[str] = []

    stats = await pool(Noting(store), lambda job: ran.append(job.id)).run()

    assert sorted(ran) == sorted(plain)  # neither job with a fact ran
    assert (store.entries[spent].status, store.entries[spent].last_error) == ("dead", SPENT)
    assert store.entries[cancelled].status == "cancelled"
    assert store.entries[cancelled].last_error == ("cancelled by an operator (jobq jobs cancel) "
                                                   "before it ran")
    assert (stats.ok, stats.dead, stats.cancelled, stats.retried) == (3, 1, 1, 0)


async def test_a_job_with_a_fact_is_settled_not_handed_back_at_a_stop() -> None:
    store = MemoryStore()
    first = store.add("k", {"n": 0})
    spent = store.add("k", {"fact": "spent"})
    waiting = store.add("k", {"n": 1})
    release = asyncio.Event()

    async def handler(job: Job) -> None:
        await release.wait()

    transport = Noting(store)
    # One worker, held by the first job: the other two wait unstarted in the buffer.
    workers = pool(transport, handler, concurrency=1, once=False)
    run = asyncio.create_task(workers.run())
    await until(lambda: workers.in_flight == 3, "three jobs received, one running")
    workers.stop()
    await until(lambda: store.entries[spent].status != "running"
                and store.entries[waiting].status != "running", "the unstarted dealt with")
    release.set()
    stats = await run

    # The spent one keeps what the transport saw: settled dead, never back to pending. The
    # plain one waiting goes back with its attempt uncounted; the running one finishes.
    assert store.entries[spent].status == "dead" and store.entries[spent].last_error == SPENT
    assert (store.entries[waiting].status, store.entries[waiting].attempts) == ("pending", 0)
    assert store.entries[first].status == "done"
    assert (stats.ok, stats.dead, stats.released) == (1, 1, 1)
