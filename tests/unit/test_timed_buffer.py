"""TimedBuffer: transaction mode's jobs picked ahead, handed back once stale, by one timer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from jobq.transports.postgres.timed import SLACK, TimedBuffer

KEEP = 0.05


async def test_items_go_stale_with_no_one_taking_and_no_later_than_their_time() -> None:
    loop = asyncio.get_running_loop()
    handed: list[tuple[list[str], float]] = []
    both = asyncio.Event()

    def on_stale(items: list[str]) -> None:
        handed.append((items, loop.time()))
        if sum(len(i) for i, _ in handed) == 3:
            both.set()

    buffer: TimedBuffer[str] = TimedBuffer(KEEP, on_stale)
    added = loop.time()
    buffer.add(["a", "b"])
    await asyncio.sleep(KEEP / 2)
    second = loop.time()
    buffer.add(["c"])
    await asyncio.wait_for(both.wait(), 5)
    assert [items for items, _ in handed] == [["a", "b"], ["c"]]
    assert handed[0][1] - added >= KEEP and handed[1][1] - second >= KEEP  # never early
    assert not buffer


async def test_the_owners_looks_keep_one_timer_and_take_oldest_first() -> None:
    stale: list[int] = []
    buffer: TimedBuffer[int] = TimedBuffer(60.0, stale.extend)
    buffer.add([1, 2, 3])
    timer = buffer._timer
    assert timer is not None
    for expected in (1, 2):
        buffer.expire()  # what the owner does before each take
        assert buffer._timer is timer  # not cancelled and armed again every time
        assert buffer.pop() == expected
    assert len(buffer) == 1 and stale == []
    assert buffer.clear() == [3] and not buffer


async def test_a_timer_armed_for_an_item_taken_since_looks_again_for_the_next() -> None:
    """On the loop's clock stopped and moved by hand: on the wall clock, a loop starved
    through the test's wait (a loaded machine) would have "taken" stale before it is taken."""
    handed: list[tuple[str, float]] = []
    buffer: TimedBuffer[str] = TimedBuffer(KEEP, lambda items: handed.extend(
        (item, asyncio.get_running_loop().time()) for item in items))
    with stopped_clock() as clock:
        buffer.add(["taken"])
        clock.advance(KEEP / 2)
        later = clock.now
        buffer.add(["kept"])
        buffer.expire()
        assert buffer.pop() == "taken"  # the timer was armed for this one
        clock.advance(KEEP / 2 + SLACK)  # its moment: the timer looks, finds "kept" fresh
        await clock.turns()
        assert handed == [] and buffer._timer is not None  # and armed again, for "kept"
        clock.advance(KEEP / 2)
        await clock.turns()
    assert [item for item, _ in handed] == ["kept"]
    assert handed[0][1] - later >= KEEP  # its own time, not the taken one's, and not forgotten


class Clock:
    """The running loop's clock, stopped: only ``advance`` moves it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @staticmethod
    async def turns(count: int = 3) -> None:
        """A few turns of the loop: the timers due by now run (a task resumed first, then
        the timers found due in the same turn)."""
        for _ in range(count):
            await asyncio.sleep(0)


@contextlib.contextmanager
def stopped_clock() -> Iterator[Clock]:
    """The running loop's ``time`` replaced by a ``Clock`` for the block (asyncio's loop
    schedules and fires its timers by it)."""
    loop = asyncio.get_running_loop()
    clock = Clock(loop.time())
    loop.time = lambda: clock.now  # type: ignore[method-assign]
    try:
        yield clock
    finally:
        del loop.time


async def test_after_stop_nothing_is_handed_and_the_owner_clears_what_is_left() -> None:
    stale: list[int] = []
    buffer: TimedBuffer[int] = TimedBuffer(0.0, stale.extend)
    buffer.stop()
    buffer.add([1])
    buffer.expire()
    assert buffer._timer is None  # no look will come
    assert stale == [] and buffer.clear() == [1]
