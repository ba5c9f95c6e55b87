"""A look at the server is never cut in the middle: a cancel or deadline only ends the wait."""

from __future__ import annotations

import asyncio

import pytest

from jobq.core.looks import Look
from tests.conftest import until


class Slow:
    """A look that takes ``seconds``; records whether it was cancelled and how often it ran."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = self.finished = self.cut = 0

    async def __call__(self) -> int:
        self.started += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cut += 1
            raise
        self.finished += 1
        return self.started


async def test_a_cancelled_caller_leaves_the_look_to_finish() -> None:
    slow = Slow(0.1)
    look = Look(slow)
    caller = asyncio.create_task(look(5.0))
    await asyncio.sleep(0.02)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller  # at once, not after the look
    await until(lambda: slow.cut or slow.finished, "the look to end", 10)
    assert (slow.cut, slow.finished) == (0, 1)


async def test_a_deadline_ends_the_wait_and_the_next_caller_joins_the_look_in_flight() -> None:
    slow = Slow(0.2)
    look = Look(slow)
    with pytest.raises(TimeoutError):
        await look(0.05)
    assert await look(1.0) == 1  # the same look, not a second one
    assert (slow.started, slow.cut) == (1, 0)
    assert await look(1.0) == 2  # that one ended: a new look
