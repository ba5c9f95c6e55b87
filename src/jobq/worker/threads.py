"""HandlerThreads: the threads plain ``def`` handlers run in, as many as the pool's workers.

Not asyncio's default executor: that one is shared, sized for the CPU count (six threads on
two cores), and joined at interpreter exit, so one hung handler thread blocked a consumer's
exit for ever. These threads are daemons, never joined: a handler still running when the
process exits is abandoned (its job was not settled, so the backend hands it out again).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None


class HandlerThreads:
    """Up to ``size`` daemon threads, started as needed; ``submit`` returns a Future."""

    def __init__(self, size: int, *, name: str = "jobq-handler") -> None:
        self.size = size
        self._name = name
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def started(self) -> int:
        """Threads started so far (never more than ``size``)."""
        return len(self._threads)

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` in one of the threads."""
        if self._closed:
            raise RuntimeError("HandlerThreads is shut down")
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        if not self._idle.acquire(blocking=False):
            self._grow()
        return future

    def _grow(self) -> None:
        with self._lock:
            if len(self._threads) < self.size:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            future, fn, args = work
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # the caller gets whatever the handler raised
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del work, future, fn, args
            self._idle.release()

    def shutdown(self) -> None:
        """Let idle threads end; never waits for a busy one (it ends when its call returns)."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
