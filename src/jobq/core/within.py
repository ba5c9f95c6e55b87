"""``within``: ``asyncio.wait_for`` without its lost-cancel race on Python 3.11, and deadlines
that do not count the time the event loop was blocked.

On 3.11 ``wait_for`` swallows a cancel that lands as its awaitable completes: it returns the
result, and the task goes on as if it had never been cancelled (python/cpython gh-86296, fixed
in 3.12 by rebuilding ``wait_for`` on ``asyncio.timeout``). A pool cancelling its pause
watcher at the moment a look answered then waited forever for it, and a --once consumer
outlived SIGTERM (seen about one run in three of a unique-keys test). ``asyncio.timeout``
tells the deadline's cancel from anyone else's, so the caller's cancel always arrives.

**A blocked loop is not a late server.** A handler that blocks the event loop (a synchronous
call inside ``async def``) for longer than a deadline used to make every call in flight time
out the moment the loop woke: the timer and the server's answer, which had arrived meanwhile,
became due in the same turn, and the timer ran first. The logs then blamed PostgreSQL or the
network and dropped healthy connections. A ``Patience`` timer that runs more than ``LATE``
after its time was kept from running by the loop itself, so it gives the call as long again
as it was late (at most the whole deadline once more) before it fires: what had arrived
during the block is read first. A server that really did not answer still times out, within
twice the deadline plus the block.

**A lost cancel, sent again.** aio-pika and aiormq still call ``wait_for`` on 3.11, so a
background task cancelled at the moment one of their calls completes runs on. ``cancelled``
cancels again until the task has ended: a consumer closing its RabbitMQ transport outlived
SIGTERM so, under load, waiting for a supervisor that had gone on to watch its new session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
LATE = 0.25  # a timer this late ran after a blocked loop, not on a busy one
RECANCEL = 0.5  # a task still running this long after its cancel lost it: cancel it again


class Patience:
    """Call ``fire`` ``seconds`` from now, of the event loop's running time: a timer that
    comes due while the loop is blocked waits as long again as it was late."""

    __slots__ = ("_fire", "_handle", "_left", "_loop", "_when")

    def __init__(self, seconds: float, fire: Callable[[], object]) -> None:
        self._loop = asyncio.get_running_loop()
        self._fire = fire
        self._left = seconds  # what one block may add back, at most
        self._when = self._loop.time() + seconds
        self._handle = self._loop.call_at(self._when, self._due)

    def _due(self) -> None:
        late = self._loop.time() - self._when
        if late > LATE and self._left > 0:
            grant = min(late, self._left)
            self._left -= grant
            self._when = self._loop.time() + grant
            self._handle = self._loop.call_at(self._when, self._due)
            return
        self._fire()

    def cancel(self) -> None:
        """Never fire."""
        self._handle.cancel()


class Deadline:
    """``async with Deadline(seconds):`` as ``asyncio.timeout(seconds)`` (TimeoutError when it
    expires, the caller's own cancel passed through), with ``Patience`` for a blocked loop."""

    __slots__ = ("_seconds", "_timeout", "_timer")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._timeout = asyncio.timeout(None)
        self._timer: Patience | None = None

    async def __aenter__(self) -> Deadline:
        await self._timeout.__aenter__()
        if self._seconds is not None:
            timeout, loop = self._timeout, asyncio.get_running_loop()
            self._timer = Patience(self._seconds, lambda: timeout.reschedule(loop.time()))
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        if self._timer is not None:
            self._timer.cancel()
        await self._timeout.__aexit__(kind, exc, tb)  # raises TimeoutError when it expired
        return None

    def expired(self) -> bool:
        """Whether the deadline passed (and cancelled the body)."""
        return self._timeout.expired()


async def within(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw``, TimeoutError after ``timeout`` seconds (None: no deadline) of the loop's
    running time (``Patience``)."""
    async with Deadline(timeout):
        return await aw


async def cancelled(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again every RECANCEL
    seconds one that runs on (a library lost its cancel); their outcomes are retrieved."""
    running = {task for task in tasks if not task.done()}
    while running:
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=RECANCEL)
    await asyncio.gather(*tasks, return_exceptions=True)
