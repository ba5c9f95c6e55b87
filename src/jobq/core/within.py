"""``within``: ``asyncio.wait_for`` without its lost-cancel race on Python 3.11.

On 3.11 ``wait_for`` swallows a cancel that lands as its awaitable completes: it returns the
result, and the task goes on as if it had never been cancelled (python/cpython gh-86296, fixed
in 3.12 by rebuilding ``wait_for`` on ``asyncio.timeout``). A pool cancelling its pause
watcher at the moment a look answered then waited forever for it, and a --once consumer
outlived SIGTERM (seen about one run in three of a unique-keys test). ``asyncio.timeout``
tells the deadline's cancel from anyone else's, so the caller's cancel always arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw``, TimeoutError after ``timeout`` seconds (None: no deadline)."""
    async with asyncio.timeout(timeout):
        return await aw
