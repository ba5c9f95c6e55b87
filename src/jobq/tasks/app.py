"""``App``: an application's tasks, the publisher they enqueue with, the handler that runs them."""

from __future__ import annotations

import contextlib
import math
import typing
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeVar, overload

from jobq.api import connect_publisher
from jobq.config import Settings
from jobq.core.errors import ConfigError
from jobq.core.job import Job
from jobq.core.port import NewJob, Publisher
from jobq.tasks.arguments import Arguments
from jobq.tasks.hooks import FailureHook, FailureHooks, LifecycleHook, run_hooks, shut_down
from jobq.tasks.task import Task, TaskFunction, TaskOptions
from jobq.worker.middleware import CallNext, Middleware
from jobq.worker.processor import Handler
from jobq.worker.retry import RetryPolicy
from jobq.worker.routing import KindRouter
from jobq.worker.threads import HandlerThreads

A = TypeVar("A")
F = TypeVar("F", bound=FailureHook)
H = TypeVar("H", bound=LifecycleHook)
M = TypeVar("M", bound=Middleware | Callable[[Job, CallNext], Awaitable[None]])


class App:
    """The tasks of an application.

    ``config`` (a YAML path or Settings; None: the defaults and ``JOBQ_...`` variables) is what
    ``enqueue`` connects with, inside ``async with app:``. A consumer runs the tasks with
    ``consumer -A module:app``, under its own configuration. ``publisher``: one to enqueue
    with instead (opened and closed with the app).
    """

    def __init__(self, config: str | Settings | None = None, *,
                 publisher: Publisher | None = None, **overrides: Any) -> None:
        self._config = config
        self._overrides = overrides
        self._tasks: dict[str, Task[Any]] = {}
        self._given = publisher  # enqueue with this one instead of connecting one
        self._publisher: Publisher | None = None
        self._stack = contextlib.AsyncExitStack()
        self.state = SimpleNamespace()  # what start-up hooks open for the tasks (ctx.state)
        self._on_failure: list[FailureHook] = []
        self._on_startup: list[LifecycleHook] = []
        self._on_shutdown: list[LifecycleHook] = []
        # The failure hooks of the consumers (and test drains) still running: their async hooks
        # are awaited at shutdown; a drain's are let go with it.
        self._observers: weakref.WeakSet[FailureHooks] = weakref.WeakSet()
        self._middleware: list[Middleware] = []

    @property
    def publisher(self) -> Publisher | None:
        """The publisher ``enqueue`` uses now; None while the app is not open."""
        return self._publisher

    @property
    def tasks(self) -> dict[str, Task[Any]]:
        """The tasks by kind."""
        return dict(self._tasks)

    @overload
    def task(self, function: TaskFunction[A], /) -> Task[A]: ...

    @overload
    def task(self, function: None = None, /, *, name: str | None = None, retries: int | None = None,
             timeout: float | None = None, queue: str | None = None, priority: int = 0,
             retry_delay: float | None = None, max_retry_delay: float | None = None,
             unique: str | None = None, delay: float = 0.0
             ) -> Callable[[TaskFunction[A]], Task[A]]: ...

    def task(self, function: TaskFunction[Any] | None = None, /, *, name: str | None = None,
             retries: int | None = None, timeout: float | None = None, queue: str | None = None,
             priority: int = 0, retry_delay: float | None = None,
             max_retry_delay: float | None = None, unique: str | None = None, delay: float = 0.0
             ) -> Task[Any] | Callable[[TaskFunction[Any]], Task[Any]]:
        """Declare a task: ``@app.task`` or ``@app.task(retries=5, timeout=30, queue="mail")``.

        The kind is ``name``, else the function's name; the arguments' type is the annotation
        of its first parameter (a dataclass or a pydantic model). Two tasks of one kind are a
        ConfigError when the second is declared, so at start-up. The options override the
        config (docs/tasks.md, "Options"): ``retry_delay`` and ``max_retry_delay`` the backoff
        (``retry.base_delay``, ``retry.max_delay``), ``unique`` a key template filled from the
        arguments (``"receipt-{order_id}"``), ``delay`` each job's wait before it may run.
        """
        options = TaskOptions(retries=retries, timeout=timeout, queue=queue, priority=priority,
                              retry_delay=retry_delay, max_retry_delay=max_retry_delay,
                              unique=unique, delay=delay)
        for option in ("retry_delay", "max_retry_delay", "timeout", "delay"):
            value = getattr(options, option)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"task {name or getattr(function, '__name__', '?')!r}: "
                                  f"{option}={value!r}: a number of seconds >= 0")

        def declare(function: TaskFunction[Any]) -> Task[Any]:
            kind = name or function.__name__
            if kind in self._tasks:
                raise ConfigError(f"two tasks claim the kind {kind!r}: "
                                  f"{_where(self._tasks[kind].function)} and {_where(function)}")
            made = Task(self, function, kind, Arguments(kind, _argument_type(kind, function)),
                        options)
            self._tasks[kind] = made
            return made

        return declare if function is None else declare(function)

    def on_failure(self, hook: F) -> F:
        """Call ``hook(failure)`` after each failed attempt of any task, once the worker's
        decision (retry, dead, cancelled) is carried out: ``@app.on_failure`` (tasks/hooks.py)."""
        self._on_failure.append(hook)
        return hook

    def on_startup(self, hook: H) -> H:
        """Run ``hook(app.state)`` when a consumer of this app starts, before it takes a job."""
        self._on_startup.append(hook)
        return hook

    def on_shutdown(self, hook: H) -> H:
        """Run ``hook(app.state)`` when a consumer of this app stops, after its last job."""
        self._on_shutdown.append(hook)
        return hook

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """A consumer's life: the start-up hooks, then the block, then the async failure hooks
        still running and the shutdown hooks, within APP_HOOKS_BOUND seconds (HookFailed if a
        hook raised, unless the block raised first: then its error stands)."""
        await run_hooks(self._on_startup, self.state, "start-up")
        try:
            yield
        except BaseException:
            await shut_down(list(self._observers), self._on_shutdown, self.state, raising=True)
            raise
        await shut_down(list(self._observers), self._on_shutdown, self.state, raising=False)

    def middleware(self, middleware: M) -> M:
        """Add per-job middleware (``jobq.Middleware``, worker/middleware.py) to the app's
        consumers and ``jobq.testing``: ``app.middleware(Timing())``, or as a decorator on
        ``async def around(job, call_next)``. They run in the order added."""
        self._middleware.append(middleware if isinstance(middleware, Middleware)
                                else _Around(middleware))
        return middleware

    def consumer_middleware(self) -> list[Middleware]:
        """One consumer's middleware: the failure hooks (if any), then those added; the async
        failure hooks still running are awaited when ``serving`` ends."""
        hooks = [FailureHooks(self._on_failure)] if self._on_failure else []
        self._observers.update(hooks)
        return [*hooks, *self._middleware]

    async def __aenter__(self) -> App:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect the publisher ``enqueue`` uses (with the config's retries and backoff)."""
        if self._publisher is not None:
            return
        if self._given is not None:
            await self._given.open()
            self._stack.push_async_callback(self._given.close)
            self._publisher = self._given
        else:
            self._publisher = await self._stack.enter_async_context(
                connect_publisher(self._config, **self._overrides))

    async def close(self) -> None:
        """Flush and disconnect the publisher."""
        self._publisher = None
        await self._stack.aclose()

    @contextlib.contextmanager
    def using(self, publisher: Publisher) -> Iterator[None]:
        """Enqueue with ``publisher`` (already open) inside the block; as before after it.
        What ``jobq.testing.worker`` uses to keep a test's jobs in memory."""
        before, self._publisher = self._publisher, publisher
        try:
            yield
        finally:
            self._publisher = before

    async def send(self, job: NewJob, *, queue: str | None = None,
                   connection: object | None = None) -> str:
        """Enqueue ``job`` with the app's publisher (``Task.enqueue`` calls this)."""
        if self._publisher is None:
            raise ConfigError("the app is not open: enqueue inside `async with app:` (or after "
                              "`await app.open()`)")
        return await self._publisher.enqueue(job, queue=queue, connection=connection)

    def consumer_policy(self, default: RetryPolicy) -> RetryPolicy:
        """The consumer's retry policy: ``default`` (the config's), with the backoff of each
        task that has one of its own."""
        return default.for_kinds({
            kind: (task.options.retry_delay, task.options.max_retry_delay)
            for kind, task in self._tasks.items()
            if task.options.retry_delay is not None or task.options.max_retry_delay is not None})

    def consumer_handler(self, threads: HandlerThreads) -> Handler:
        """The pool's handler for this app: each job to the task of its kind."""
        return KindRouter({kind: task.starter(threads) for kind, task in self._tasks.items()},
                          None, unknown="no task for kind {kind} (known: {known})")


class _Around(Middleware):
    """A plain ``async def around(job, call_next)`` as middleware."""

    def __init__(self, around: Callable[[Job, CallNext], Awaitable[None]]) -> None:
        self._around = around

    async def around(self, job: Job, call_next: CallNext) -> None:
        """The function's run."""
        await self._around(job, call_next)


def _argument_type(kind: str, function: Callable[..., object]) -> type[Any]:
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError) as exc:
        raise ConfigError(f"task {kind!r}: cannot read its annotations: {exc}") from exc
    first = next(iter(hints.items()), None)
    if first is None or first[0] == "return":
        raise ConfigError(f"task {kind!r}: annotate its first parameter with the arguments' "
                          "type (a dataclass or a pydantic model)")
    return typing.cast(type[Any], first[1])


def _where(function: Callable[..., object]) -> str:
    return f"{function.__module__}.{function.__qualname__}"

