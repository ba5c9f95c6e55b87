"""An open-loop sender: jobs go out when they are due, whatever the confirms of earlier ones do.

``producer --rate R`` offers R jobs a second. Each job is sent at its own due time (together
with any others due by then), and the send is not held back by the previous sends' publisher
confirms or commits: those are awaited in the background, up to ``in_flight`` calls at once.
Waiting for each batch's confirm before the next one turned the producer into a closed loop:
a 20 ms confirm at 2,000 jobs/s offered gave ~1,500 jobs/s, and sending rate/50 jobs in one
burst every 20 ms made every job of a burst wait behind the ones encoded and written before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from jobq.core.port import NewJob

IN_FLIGHT = 256  # enqueue calls awaiting their confirm / commit at once
# The shortest sleep between sends. uvloop's timers count whole milliseconds: a shorter sleep
# returns at once, and the sender spun on the CPU it shares with the broker and the consumers.
TICK = 0.001


@dataclass(slots=True)
class Paced:
    """What an open-loop run did: jobs sent, enqueue calls, the worst lag behind schedule."""

    sent: int = 0
    calls: int = 0
    max_lag: float = 0.0  # seconds a send started after its first job was due


async def send_paced(enqueue: Callable[[Sequence[NewJob]], Awaitable[object]],
                     make: Callable[[int, int], Sequence[NewJob]], *, count: int, rate: float,
                     max_batch: int, in_flight: int = IN_FLIGHT) -> Paced:
    """Send ``make(first, size)`` through ``enqueue`` at ``rate`` jobs/s until ``count`` are sent.

    ``make`` is called at the moment of sending (so a send-time stamp it puts in the jobs is
    true). Returns once every call has been confirmed; the first failure stops the sending and
    is raised after the calls already made have finished.
    """
    loop = asyncio.get_running_loop()
    room = asyncio.Semaphore(in_flight)
    calls: set[asyncio.Task[object]] = set()
    failures: list[BaseException] = []
    done = Paced()

    def finished(task: asyncio.Task[object]) -> None:
        calls.discard(task)
        room.release()
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]

    started = loop.time()
    try:
        while done.sent < count and not failures:
            now = loop.time()
            due = min(count, int((now - started) * rate) + 1)  # jobs due by now, in total
            if due <= done.sent:
                await asyncio.sleep(max(TICK, started + done.sent / rate - now))
                continue
            await room.acquire()
            if failures:
                room.release()
                break
            done.max_lag = max(done.max_lag, loop.time() - (started + done.sent / rate))
            size = min(due - done.sent, max_batch)
            task = asyncio.ensure_future(enqueue(make(done.sent, size)))
            calls.add(task)
            task.add_done_callback(finished)
            done.sent += size
            done.calls += 1
        await asyncio.gather(*calls, return_exceptions=True)
    finally:
        for task in list(calls):  # cancelled ourselves: do not leave sends running
            task.cancel()
    if failures:
        raise failures[0]
    return done
