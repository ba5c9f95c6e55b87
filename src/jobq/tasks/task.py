"""One task: a kind, its options, its typed arguments, and ``enqueue`` checked by mypy."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobq.core.errors import InvalidArguments, JobTimeout
from jobq.core.job import Job
from jobq.core.port import NewJob
from jobq.tasks.arguments import Arguments
from jobq.worker.processor import Handler, as_async
from jobq.worker.threads import HandlerThreads

if TYPE_CHECKING:
    from jobq.tasks.app import App

A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Context:
    """What a running task gets beside its arguments: the job (id, attempt, headers) and its app."""

    job: Job
    app: App

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.job.attempt

    @property
    def redelivered(self) -> bool:
        """True once a run of this job was lost with its consumer (``Job.redelivered``)."""
        return self.job.redelivered

    @property
    def state(self) -> SimpleNamespace:
        """The app's state: what its start-up hooks opened (a client, a pool)."""
        return self.app.state


# What ``@app.task`` takes: ``async def f(args: A, ctx: Context) -> None`` or a plain ``def``
# (run in one of the consumer's handler threads).
TaskFunction = Callable[[A, Context], Awaitable[None] | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskOptions:
    """A task's own settings; None leaves the config's (``retry.max_attempts``, the queue, ...)."""

    retries: int | None = None  # retries after the first attempt: max_attempts = retries + 1
    timeout: float | None = None  # seconds an attempt may run; then it fails as JobTimeout
    queue: str | None = None
    priority: int = 0
    retry_delay: float | None = None  # the backoff's first delay (retry.base_delay)
    max_retry_delay: float | None = None  # and its cap (retry.max_delay)
    unique: str | None = None  # the unique key, a template of the arguments: "receipt-{order_id}"
    delay: float = 0.0  # seconds each job waits before it may run, unless enqueue says otherwise


def unique_key(kind: str, template: str, payload: dict[str, Any]) -> str:
    """The task's ``unique`` template filled in from the job's arguments (as encoded)."""
    try:
        return template.format(**payload)
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise InvalidArguments(f"task {kind!r}: its unique key {template!r} cannot be made from "
                               f"these arguments: {type(exc).__name__}: {exc}") from None


class Task(Generic[A]):
    """A task of an ``App``; ``await task.enqueue(args)`` puts a job of its kind in its queue."""

    def __init__(self, app: App, function: TaskFunction[A], kind: str, arguments: Arguments[A],
                 options: TaskOptions) -> None:
        self.app = app
        self.function = function
        self.kind = kind
        self.arguments = arguments
        self.options = options
        self.is_async = inspect.iscoroutinefunction(function)

    def __repr__(self) -> str:
        return f"<Task {self.kind} ({self.arguments.type.__name__})>"

    def new_job(self, args: A, *, delay: float | None = None, run_at: datetime | None = None,
                priority: int | None = None, key: str | None = None) -> NewJob:
        """The job ``enqueue`` sends (InvalidArguments if ``args`` would not validate at run,
        or lack a field the task's ``unique`` template names)."""
        options = self.options
        payload = self.arguments.encode(args)
        if key is None and options.unique is not None:
            key = unique_key(self.kind, options.unique, payload)
        if delay is None:  # the task's own, unless the job is given a time to run at
            delay = options.delay if run_at is None else 0.0
        return NewJob(kind=self.kind, payload=payload, run_at=run_at, key=key, delay=delay,
                      priority=options.priority if priority is None else priority,
                      max_attempts=None if options.retries is None else options.retries + 1)

    async def enqueue(self, args: A, *, delay: float | None = None, run_at: datetime | None = None,
                      priority: int | None = None, key: str | None = None,
                      queue: str | None = None, connection: object | None = None) -> str:
        """Enqueue a job of this task; returns its id (InvalidArguments, nothing written, if
        ``args`` would not validate at run). ``delay``, ``queue``, ``priority``, ``key``: this
        job's, over the task's and the config's. ``connection``: your own open PostgreSQL
        transaction, which the job then commits (or rolls back) with."""
        job = self.new_job(args, delay=delay, run_at=run_at, priority=priority, key=key)
        return await self.app.send(job, queue=queue or self.options.queue, connection=connection)

    def starter(self, threads: HandlerThreads) -> Handler:
        """``job -> awaitable`` running ``job`` as this task: its arguments decoded
        (InvalidArguments: dead at once), the function called (a plain ``def`` in one of
        ``threads``), within the task's timeout if it has one. Without one, what the call
        returns is the function's own coroutine, nothing wrapped around it: every job runs it."""
        function, decode, app = self.function, self.arguments.decode, self.app

        def call(job: Job) -> Any:
            return function(decode(job.payload), Context(job, app))

        start: Handler = call if self.is_async else as_async(call, threads)
        if self.options.timeout is None:
            return start

        async def timed(job: Job) -> None:
            await self._within_timeout(start(job))

        return timed

    async def _within_timeout(self, running: Awaitable[None]) -> None:
        assert self.options.timeout is not None
        deadline = asyncio.timeout(self.options.timeout)
        try:
            async with deadline:
                await running
        except TimeoutError:
            if not deadline.expired():
                raise  # the task's own TimeoutError (a call of its that timed out)
            raise JobTimeout(f"task {self.kind!r} ran past its timeout of "
                             f"{self.options.timeout:g}s") from None
