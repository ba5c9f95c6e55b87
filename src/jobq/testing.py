"""Tasks in tests: an app's jobs kept in memory, run on demand, their errors raised.

```python
async def test_receipt_is_sent() -> None:
    async with jobq.testing.worker(app) as worker:
        await send_receipt.enqueue(Receipt(order_id=42, to="a@example.com"))
        worker.assert_enqueued(send_receipt, Receipt(order_id=42, to="a@example.com"))
        await worker.drain()            # runs them; a task's exception fails the test
```

The jobs go through the same code as in production: the app's start-up and shutdown hooks
run around the block, its middleware around each run and after each decision, the arguments
are encoded to JSON and validated at enqueue and again at run, the pool and its settler
decide every outcome, the failure hooks hear of each failed attempt; only the queue is the
in-memory one (``jobq.transports.memory``).

``eager(app)`` is for a unit test of code that enqueues: each enqueue runs its task at once
(an ``async def`` in the caller's task, a plain ``def`` in a thread of its own, awaited) and
raises what the task raised (a delay or run_at is not waited for;
no hook runs: set what the tasks need in ``app.state``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from jobq.core.job import Decision, Job
from jobq.core.port import NewJob
from jobq.tasks.app import App
from jobq.tasks.hooks import FailureHooks
from jobq.tasks.task import Task
from jobq.transports.memory import MemoryPublisher, MemoryStore, MemoryTransport, through_json
from jobq.worker.middleware import observer_of, wrapped
from jobq.worker.pool import WorkerPool
from jobq.worker.processor import Handler
from jobq.worker.retry import RetryPolicy
from jobq.worker.stats import PoolObserver, PoolStats
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

    def assert_enqueued(self, task: Task[A], args: A | None = None) -> None:
        """AssertionError unless a job of ``task`` (with these ``args``, if given) waits to run."""
        waiting = self.enqueued(task)
        if not waiting:
            kinds = sorted({entry.kind for entry in self.store.entries.values()
                            if entry.status == "pending"})
            raise AssertionError(f"no job of task {task.kind!r} was enqueued (waiting: "
                                 f"{', '.join(kinds) or 'nothing'})")
        if args is not None and args not in waiting:
            raise AssertionError(f"no job of task {task.kind!r} with {args!r}; enqueued: "
                                 f"{waiting!r}")

    async def drain(self, *, raise_errors: bool = True) -> PoolStats:
        """Run every job that is due, retries that come due meanwhile included, then return.

        With ``raise_errors`` the first exception a task raised is raised here (after the
        drain), so a failing task fails the test instead of being retried out of sight;
        retries wait no backoff. The app's failure hooks hear of each failed attempt, the
        async ones ended before this returns.
        """
        errors: list[BaseException] = []
        threads = HandlerThreads(self._concurrency)
        middleware = self.app.consumer_middleware()
        run = wrapped(middleware, self.app.consumer_handler(threads))

        async def handle(job: Job) -> None:
            try:
                await run(job)
            except Exception as exc:
                errors.append(exc)
                raise

        try:
            stats = await self._pool(handle, observer_of(middleware, _NOBODY)).run()
            for hooks in middleware:
                if isinstance(hooks, FailureHooks):
                    await hooks.wait()  # the async failure hooks of this drain have ended
        finally:
            threads.shutdown()
        if raise_errors and errors:
            raise errors[0]
        return stats

    def _pool(self, handler: Handler, observer: PoolObserver) -> WorkerPool:
        return WorkerPool(MemoryTransport(self.store), handler,
                          RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=False),
                          concurrency=self._concurrency, buffer_size=self._concurrency,
                          job_timeout=300.0, shutdown_timeout=5.0, poll_timeout=0.01, once=True,
                          observer=observer)


class _Nobody:
    """The last observer of a test's pool: no metrics to count into."""

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """Nothing to count."""

    def gauges(self, in_flight: int, buffered: int) -> None:
        """Nothing to show."""


_NOBODY = _Nobody()


@contextlib.asynccontextmanager
async def worker(app: App, *, concurrency: int = 4) -> AsyncIterator[TestWorker]:
    """``app``'s enqueues kept in memory for the block, and a ``TestWorker`` to run them;
    the app's start-up hooks run on the way in, its shutdown hooks on the way out. An app
    open on ``transport: memory`` keeps its store: what it enqueued before the block (a web
    request in the test, say) is there to assert and to drain."""
    open_on = app.publisher
    publisher = open_on if isinstance(open_on, MemoryPublisher) else MemoryPublisher(MemoryStore())
    with app.using(publisher):
        async with app.serving():
            yield TestWorker(app, publisher.store, concurrency)


class EagerPublisher:
    """A Publisher whose ``enqueue`` runs the job's task at once (``eager``)."""

    def __init__(self, app: App, threads: HandlerThreads) -> None:
        self._run = app.consumer_handler(threads)
        self._ids = itertools.count(1)

    async def open(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to flush."""

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """Run ``job``'s task now, its arguments through JSON; raise what it raised."""
        job_id = f"eager-{next(self._ids)}"
        await self._run(Job(id=job_id, queue=queue or "eager", kind=job.kind,
                            payload=through_json(job.payload),
                            max_attempts=job.max_attempts or 1,
                            enqueued_at=datetime.now(UTC)))
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """Run each job's task now, in order."""
        return [await self.enqueue(job, queue=queue) for job in jobs]


@contextlib.contextmanager
def eager(app: App) -> Iterator[None]:
    """Inside the block, ``task.enqueue`` runs the task at once and raises what it raised."""
    threads = HandlerThreads(1)
    try:
        with app.using(EagerPublisher(app, threads)):
            yield
    finally:
        threads.shutdown()

