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
``TimeoutError`` (its job may or may not be enqueued). ``close`` waits for the calls in
flight, then flushes and disconnects; a call after it raises. A publisher opened before a
``fork`` (gunicorn ``--preload``) is refused in the child: open one per process. To enqueue
inside your own PostgreSQL transaction, use ``jobq.transports.postgres.enqueue_sync(conn,
job, ...)``: it needs no publisher at all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from jobq.api import connect_publisher
from jobq.config import Settings, load_settings
from jobq.core.port import NewJob, Publisher

T = TypeVar("T")
log = logging.getLogger("jobq")
BACKSTOP = 30.0  # s beyond the publisher's own deadlines before a call gives up waiting


class SyncPublisher:
    """A Publisher for synchronous code: ``open`` (or ``with``), ``enqueue``, ``close``."""

    def __init__(self, config: str | Settings | None = None, **overrides: Any) -> None:
        """``config`` and ``overrides`` as ``jobq.api.connect_publisher`` takes them."""
        self.settings = config if isinstance(config, Settings) else load_settings(
            config, {key.replace("__", "."): value for key, value in overrides.items()})
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._publisher: Publisher | None = None
        self._stop: asyncio.Event | None = None
        self._pid = 0
        self._inflight: set[concurrent.futures.Future[Any]] = set()

    def open(self) -> SyncPublisher:
        """Start the loop thread and connect there (with the configured retries and backoff)."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("this SyncPublisher is open already")
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._thread = threading.Thread(target=self._serve, args=(ready,),
                                            name="jobq-sync-publisher", daemon=True)
            self._pid = os.getpid()
            self._thread.start()
        connect = self.settings.connect
        try:
            ready.result(timeout=connect.attempts * (connect.timeout + connect.backoff_max)
                         + BACKSTOP)
        except BaseException:
            self.close()
            raise
        return self

    def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        """The loop thread: connect, serve the calls until ``close``, then disconnect."""

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            try:
                async with connect_publisher(self.settings) as publisher:
                    self._publisher = publisher
                    ready.set_result(None)
                    await self._stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise
            finally:
                self._publisher = None

        try:
            asyncio.run(main())  # cancels what is left and shuts the loop down properly
        except Exception as exc:  # open() raised it, unless it came at the close
            if ready.done() and ready.exception() is None:
                log.warning("SyncPublisher: closing the publisher failed: %s", exc)

    def enqueue(self, job: NewJob, *, queue: str | None = None,
                timeout: float | None = None) -> str:
        """Enqueue one job; its id. Errors as ``Publisher.enqueue``."""
        publisher = self._ready()
        return self._call(publisher.enqueue(job, queue=queue, timeout=timeout),
                          self._bound(timeout))

    def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                     timeout: float | None = None) -> list[str]:
        """Enqueue a batch in as few round trips as the backend allows; the ids in order."""
        publisher = self._ready()
        return self._call(publisher.enqueue_many(jobs, queue=queue, timeout=timeout),
                          self._bound(timeout))

    def close(self) -> None:
        """Let the calls in flight finish, flush and disconnect, end the thread. Closing twice,
        or a publisher that never opened, does nothing."""
        with self._lock:
            thread, loop, stop = self._thread, self._loop, self._stop
            self._thread, pending = None, list(self._inflight)
        if thread is None:
            return
        concurrent.futures.wait(pending, timeout=self._bound(None))
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=BACKSTOP)

    def __enter__(self) -> SyncPublisher:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _ready(self) -> Publisher:
        """The open publisher, or RuntimeError saying why there is none."""
        if self._pid and self._pid != os.getpid():
            raise RuntimeError("this SyncPublisher was opened in another process (before a "
                               "fork): open one in each process")
        publisher = self._publisher
        if self._thread is None or publisher is None:
            raise RuntimeError("this SyncPublisher is not open: use `with SyncPublisher(...)` "
                               "or call open() first")
        return publisher

    def _bound(self, timeout: float | None) -> float:
        limits = self.settings.limits
        return (limits.enqueue_timeout if timeout is None else timeout) + BACKSTOP

    def _call(self, work: Coroutine[Any, Any, T], seconds: float) -> T:
        """Run ``work`` on the loop thread; its result or its error, or TimeoutError when it
        has not ended within ``seconds`` (only then: the work's own TimeoutError is its)."""
        with self._lock:  # after close() began, nothing new is taken on
            loop = self._loop
            if self._thread is None or loop is None or loop.is_closed():
                work.close()
                raise RuntimeError("this SyncPublisher is closed")
            future = asyncio.run_coroutine_threadsafe(work, loop)
            self._inflight.add(future)
        try:
            done, _ = concurrent.futures.wait([future], timeout=seconds)
            if not done:
                future.cancel()
                raise TimeoutError(f"jobq: no answer within {seconds:g}s; the job(s) may or "
                                   "may not be enqueued")
            return future.result()
        finally:
            with self._lock:
                self._inflight.discard(future)
