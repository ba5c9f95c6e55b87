"""A cancel that lands as a look answers is not lost (the 3.11 wait_for race, jobq.core.within)."""

from __future__ import annotations

import asyncio

import pytest

from jobq.core.looks import Look
from jobq.core.within import cancelled, within


async def test_a_cancel_as_the_look_answers_reaches_the_caller() -> None:
    answered = asyncio.Event()
    reached: list[str] = []

    async def probe() -> bool:
        await answered.wait()
        return True

    look = Look(probe)

    async def watcher() -> None:  # as PauseWatch.run: look, then wait for the next look
        await look(5)
        reached.append("went on")
        await asyncio.sleep(30)

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0.01)  # the watcher waits on the look
    answered.set()
    await asyncio.sleep(0)  # the probe finishes; the watcher is woken, not yet run
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)  # with the race: the cancel is lost, a timeout here
    assert reached == []


async def test_within_times_out_and_returns() -> None:
    assert await within(asyncio.sleep(0, "x"), 1) == "x"
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(5), 0.05)


async def test_a_task_that_lost_its_cancel_is_cancelled_again_until_it_ends() -> None:
    waiting = asyncio.Event()
    lost: list[str] = []

    async def background() -> None:  # as a loop over aio-pika calls under 3.11's wait_for
        waiting.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            lost.append("the first cancel")  # the call returned as if never cancelled
        await asyncio.sleep(3600)  # the loop's next wait

    task = asyncio.create_task(background())
    await waiting.wait()
    async with asyncio.timeout(5):
        await cancelled(task)
    assert task.cancelled() and lost == ["the first cancel"]
