"""Enqueue from synchronous code (Django and Flask views, scripts, management commands) on
either backend.

``SyncPublisher`` runs the backend's async Publisher on an event loop of its own, in a daemon
thread it starts when opened; each call hands its coroutine to that loop and blocks until the
backend answered. Any number of threads may call one publisher at once: their enqueues run
concurrently on its loop, over its connections. It works from inside a running event loop
too (it never touches the caller's), though async code should use ``connect_publisher``.

    with SyncPublisher("configs/rabbitmq.yaml", queue="emails") as publisher:
        publisher.enqueue(NewJob(kind="welcome", payload={"user": 42}))

Every call has a deadline: the publisher's own (``limits.enqueue_timeout`` for a full queue,
``postgres.network_timeout`` or the AMQP timeouts for a silent server) and, as a backstop in
case the loop itself is stuck, ``BACKSTOP`` seconds more, after which the call raises
``TimeoutError`` (its job may or may not be enqueued). To enqueue inside your own PostgreSQL
transaction, use ``jobq.transports.postgres.enqueue_sync(conn, job, ...)`` instead: it needs
no publisher at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from jobq.api import connect_publisher
from jobq.config import Settings, load_settings
from jobq.core.port import NewJob, Publisher

T = TypeVar("T")
BACKSTOP = 30.0  # s beyond the publisher's own deadlines before a call gives up waiting


class SyncPublisher:
    """A Publisher for synchronous code: ``open`` (or ``with``), ``enqueue``, ``close``."""

    def __init__(self, config: str | Settings | None = None, **overrides: Any) -> None:
        """``config`` and ``overrides`` as ``jobq.api.connect_publisher`` takes them."""
        self.settings = config if isinstance(config, Settings) else load_settings(
            config, {key.replace("__", "."): value for key, value in overrides.items()})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._publisher: Publisher | None = None

    def open(self) -> SyncPublisher:
        """Start the loop thread and connect (with the configured retries and backoff)."""
        if self._loop is not None:
            raise RuntimeError("this SyncPublisher is open already")
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="jobq-sync-publisher",
                                        daemon=True)
        self._thread.start()
        self._loop = loop
        connect = self.settings.connect
        try:
            self._publisher = self._call(self._connect(), connect.attempts
                                         * (connect.timeout + connect.backoff_max))
        except BaseException:
            self._stop()
            raise
        return self

    async def _connect(self) -> Publisher:
        self._stack = contextlib.AsyncExitStack()
        return await self._stack.enter_async_context(connect_publisher(self.settings))

    def enqueue(self, job: NewJob, *, queue: str | None = None,
                timeout: float | None = None) -> str:
        """Enqueue one job; its id. Errors as ``Publisher.enqueue``."""
        return self._call(self._open().enqueue(job, queue=queue, timeout=timeout),
                          self._bound(timeout))

    def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                     timeout: float | None = None) -> list[str]:
        """Enqueue a batch in as few round trips as the backend allows; the ids in order."""
        return self._call(self._open().enqueue_many(jobs, queue=queue, timeout=timeout),
                          self._bound(timeout))

    def close(self) -> None:
        """Flush and disconnect, then end the loop thread. Closing twice does nothing."""
        if self._loop is None:
            return
        try:
            if self._stack is not None:
                self._call(self._stack.aclose(), BACKSTOP)
        finally:
            self._stop()

    def __enter__(self) -> SyncPublisher:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _open(self) -> Publisher:
        if self._publisher is None:
            raise RuntimeError("this SyncPublisher is not open: use `with SyncPublisher(...)` "
                               "or call open() first")
        return self._publisher

    def _bound(self, timeout: float | None) -> float:
        limits = self.settings.limits
        return (limits.enqueue_timeout if timeout is None else timeout) + BACKSTOP

    def _call(self, work: Coroutine[Any, Any, T], seconds: float) -> T:
        """Run ``work`` on the loop thread; its result, or TimeoutError after ``seconds``."""
        assert self._loop is not None
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(timeout=seconds)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"jobq: no answer within {seconds:g}s; the job(s) may or may "
                               "not be enqueued") from None

    def _stop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = self._stack = self._publisher = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=BACKSTOP)
            if not thread.is_alive():
                loop.close()
