"""Tasks in tests: an app's jobs kept in memory, run on demand, their errors raised.

```python
async def test_receipt_is_sent() -> None:
    async with jobq.testing.worker(app) as worker:
        await send_receipt.enqueue(Receipt(order_id=42, to="a@example.com"))
        assert worker.enqueued(send_receipt) == [Receipt(order_id=42, to="a@example.com")]
        await worker.drain()            # runs them; a task's exception fails the test
```

The jobs go through the same code as in production: the arguments are encoded to JSON and
validated at enqueue and again at run, the pool and its settler decide every outcome; only
the queue is the in-memory one (``jobq.transports.memory``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from jobq.core.job import Job
from jobq.tasks.app import App
from jobq.tasks.task import Task
from jobq.transports.memory import MemoryPublisher, MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.processor import Handler
from jobq.worker.retry import RetryPolicy
from jobq.worker.stats import PoolStats
from jobq.worker.threads import HandlerThreads

A = TypeVar("A")


class TestWorker:
    """The in-memory queue of one ``worker(app)`` block, and a consumer to drain it."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, app: App, store: MemoryStore, concurrency: int) -> None:
        self.app = app
        self.store = store
        self._concurrency = concurrency

    def enqueued(self, task: Task[A]) -> list[A]:
        """The arguments of ``task``'s jobs waiting to run, in the order they were enqueued."""
        return [task.arguments.decode(entry.payload) for entry in self.store.entries.values()
                if entry.kind == task.kind and entry.status == "pending"]

    async def drain(self, *, raise_errors: bool = True) -> PoolStats:
        """Run every job that is due, retries that come due meanwhile included, then return.

        With ``raise_errors`` the first exception a task raised is raised here (after the
        drain), so a failing task fails the test instead of being retried out of sight;
        retries wait no backoff.
        """
        errors: list[BaseException] = []
        threads = HandlerThreads(self._concurrency)
        run = self.app.consumer_handler(threads)

        async def handle(job: Job) -> None:
            try:
                await run(job)
            except Exception as exc:
                errors.append(exc)
                raise

        try:
            stats = await self._pool(handle).run()
        finally:
            threads.shutdown()
        if raise_errors and errors:
            raise errors[0]
        return stats

    def _pool(self, handler: Handler) -> WorkerPool:
        return WorkerPool(MemoryTransport(self.store), handler,
                          RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=False),
                          concurrency=self._concurrency, buffer_size=self._concurrency,
                          job_timeout=300.0, shutdown_timeout=5.0, poll_timeout=0.01, once=True)


@contextlib.asynccontextmanager
async def worker(app: App, *, concurrency: int = 4) -> AsyncIterator[TestWorker]:
    """``app``'s enqueues kept in memory for the block, and a ``TestWorker`` to run them."""
    store = MemoryStore()
    with app.using(MemoryPublisher(store)):
        yield TestWorker(app, store, concurrency)

