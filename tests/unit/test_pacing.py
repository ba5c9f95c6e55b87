"""The open-loop sender behind ``producer --rate``: no server needed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from jobq.core.port import NewJob
from jobq.feeds.pacing import send_paced


def make(first: int, size: int) -> list[NewJob]:
    return [NewJob(kind="k", payload={"n": first + i}) for i in range(size)]


class SlowConfirms:
    """An enqueue whose confirm takes ``confirm`` seconds; records what was sent and when."""

    def __init__(self, confirm: float, fail_on_call: int | None = None) -> None:
        self.confirm = confirm
        self.fail_on_call = fail_on_call
        self.calls: list[tuple[float, list[int]]] = []  # loop time, job numbers
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished = 0

    async def __call__(self, jobs: Sequence[NewJob]) -> list[str]:
        self.calls.append((asyncio.get_running_loop().time(), [j.payload["n"] for j in jobs]))
        call = len(self.calls)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.confirm)
            if call == self.fail_on_call:
                raise RuntimeError("refused")
            return [str(j.payload["n"]) for j in jobs]
        finally:
            self.in_flight -= 1
            self.finished += 1


async def test_sends_go_out_while_earlier_confirms_are_awaited() -> None:
    # A confirm slower than the whole run: a sender that waited for each one in turn would
    # have one call in flight at a time and take calls x 0.3 s.
    enqueue = SlowConfirms(confirm=0.3)
    paced = await send_paced(enqueue, make, count=40, rate=400.0, max_batch=1000)
    assert enqueue.max_in_flight > 1
    assert enqueue.finished == len(enqueue.calls) == paced.calls
    sent = [n for _, numbers in enqueue.calls for n in numbers]
    assert sent == list(range(40)) and paced.sent == 40


async def test_no_job_is_sent_before_it_is_due() -> None:
    enqueue = SlowConfirms(confirm=0.0)
    rate = 200.0
    start = asyncio.get_running_loop().time()
    await send_paced(enqueue, make, count=30, rate=rate, max_batch=1000)
    for at, numbers in enqueue.calls:
        assert at - start >= numbers[-1] / rate - 1e-6  # the last job of a send was due by then


async def test_max_batch_caps_each_send() -> None:
    enqueue = SlowConfirms(confirm=0.0)
    await send_paced(enqueue, make, count=20, rate=10_000.0, max_batch=3)
    assert max(len(numbers) for _, numbers in enqueue.calls) <= 3
    assert [n for _, numbers in enqueue.calls for n in numbers] == list(range(20))


async def test_a_failed_send_stops_the_sending_and_is_raised() -> None:
    enqueue = SlowConfirms(confirm=0.02, fail_on_call=2)
    with pytest.raises(RuntimeError, match="refused"):
        await send_paced(enqueue, make, count=10_000, rate=1000.0, max_batch=1000)
    assert len(enqueue.calls) < 10_000  # stopped early
    assert enqueue.in_flight == 0  # the calls already made finished before the raise


async def test_in_flight_bounds_the_calls_awaiting_confirms() -> None:
    enqueue = SlowConfirms(confirm=0.05)
    await send_paced(enqueue, make, count=60, rate=5000.0, max_batch=1, in_flight=4)
    assert enqueue.max_in_flight == 4
