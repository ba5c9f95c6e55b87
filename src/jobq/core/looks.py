"""A look at the server (depth, pause) that no cancel or deadline cuts in the middle.

Cut in the middle, an AMQP RPC closes its channel (aiormq), and at the wrong moment the whole
connection, which a consumer's admin shares with its consuming channel (seen: CHANNEL_ERROR
"expected 'channel.open'", and a monitor whose stop waited forever for the cancelled look).
So the caller waits on a shield: its cancel or deadline ends its wait at once, the look runs
to its end (bounded by the connection's own timeouts) and its answer is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from jobq.core.within import within

T = TypeVar("T")


def _retrieve(task: asyncio.Future[T]) -> None:
    if not task.cancelled():
        task.exception()  # a dropped look's failure is not an unretrieved error


async def uncut(look: Awaitable[T]) -> T:
    """``look``'s answer; a cancel of the caller ends its wait at once, and ``look`` runs on to
    its end (its own deadline bounds it) with its answer dropped."""
    running = asyncio.ensure_future(look)
    running.add_done_callback(_retrieve)
    return await asyncio.shield(running)


class Look(Generic[T]):
    """Runs ``look`` at most once at a time, each caller waiting at most ``timeout``."""

    def __init__(self, look: Callable[[], Awaitable[T]]) -> None:
        self._look = look
        self._running: asyncio.Future[T] | None = None

    async def __call__(self, timeout: float) -> T:
        """The answer of the look in flight, or of a new one; TimeoutError after ``timeout``."""
        running = self._running
        if running is None or running.done():
            running = self._running = asyncio.ensure_future(self._look())
            running.add_done_callback(_retrieve)
        return await within(asyncio.shield(running), timeout)
