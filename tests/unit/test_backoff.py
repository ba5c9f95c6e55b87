"""Backoff: the one formula (exponential, full jitter, capped) and the loop helpers around it."""

from __future__ import annotations

import asyncio
import contextlib
import types

import pytest

from jobq.config import ConnectConfig
from jobq.core import backoff as backoff_module
from jobq.core.backoff import Attempt, Backoff, pause


def test_the_ceiling_doubles_from_base_up_to_the_cap() -> None:
    backoff = Backoff(base=0.5, cap=3.0, jitter=False)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert backoff.delay(0) == 0.5  # attempts count from 1; nothing below it shrinks the base


def test_full_jitter_scales_the_ceiling_by_the_injected_rand() -> None:
    rolls = iter([0.0, 0.25, 0.999, 1.0])
    backoff = Backoff(base=1.0, cap=100.0, rand=lambda: next(rolls))
    assert [backoff.delay(4) for _ in range(4)] == [0.0, 2.0, 7.992, 8.0]


def test_jittered_delays_stay_between_zero_and_the_capped_ceiling() -> None:
    backoff = Backoff(base=1.0, cap=10.0)
    for n in range(1, 12):
        delays = [backoff.delay(n) for _ in range(200)]
        assert all(0.0 <= d <= min(10.0, 2.0 ** (n - 1)) for d in delays)


def test_a_retry_loop_that_never_gives_up_cannot_overflow() -> None:
    assert Backoff(base=0.5, cap=10.0, jitter=False).delay(100_000) == 10.0


def test_connect_backoff_uses_the_connect_settings() -> None:
    backoff = ConnectConfig(backoff_base=0.25, backoff_max=4.0).backoff()
    assert (backoff.base, backoff.cap, backoff.jitter) == (0.25, 4.0, True)


def test_an_attempt_knows_whether_it_is_the_last_and_prints_as_n_of_limit() -> None:
    assert str(Attempt(3, 10, 1.0)) == "3/10" and not Attempt(3, 10, 1.0).last
    assert Attempt(10, 10, 1.0).last
    assert str(Attempt(7, 0, 1.0)) == "7" and not Attempt(10**6, 0, 1.0).last


async def test_attempts_pause_between_tries_and_stop_at_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    tries = [a async for a in Backoff(base=1.0, cap=3.0, jitter=False).attempts(4)]
    assert [(a.number, a.delay) for a in tries] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0)]
    assert tries[-1].last
    assert slept == [1.0, 2.0, 3.0]  # a pause between tries, none after the last


async def test_leaving_the_loop_skips_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    async for attempt in Backoff(base=1.0, cap=3.0, jitter=False).attempts():
        if attempt.number == 3:
            break
    assert slept == [1.0, 2.0]


class FakeClock:
    """The loop's time and sleep as Backoff sees them, advanced by the sleeps alone: what
    happens at the deadline, whatever the machine's load does to real sleeps."""

    def __init__(self, overshoot: float = 0.0) -> None:
        self.now = 100.0
        self.overshoot = overshoot  # how late each sleep wakes (a loaded machine)
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay + self.overshoot


def on(clock: FakeClock) -> types.SimpleNamespace:
    """``asyncio`` as jobq.core.backoff uses it, its clock and sleep the fake's."""
    real = {name: getattr(asyncio, name) for name in ("CancelledError", "current_task", "Event")}
    return types.SimpleNamespace(**real, sleep=clock.sleep, get_running_loop=lambda: clock)


async def test_attempts_until_a_deadline_cut_the_last_pause_and_then_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(backoff_module, "asyncio", on(clock))
    until = clock.now + 0.15
    numbers = [a.number async for a in Backoff(base=0.1, cap=0.1, jitter=False).attempts(until=until)]
    assert numbers == [1, 2, 3]  # at 0, 0.1 and 0.15: the second pause is cut to the deadline
    assert clock.slept == [0.1, pytest.approx(0.05)] and clock.now == pytest.approx(until)
    late = [a.number async for a in Backoff(base=0.1, cap=0.1).attempts(until=clock.now - 1)]
    assert late == [1]  # the first try always runs; none follows once the deadline has passed
    # A pause that wakes past the deadline (a loaded machine): its try runs, none after it.
    # Before, this test slept for real and, under load, saw this instead of the cut pause.
    slow = FakeClock(overshoot=0.1)
    monkeypatch.setattr(backoff_module, "asyncio", on(slow))
    numbers = [a.number async for a in Backoff(base=0.1, cap=0.1, jitter=False).attempts(
        until=slow.now + 0.15)]
    assert numbers == [1, 2]


async def test_pause_wakes_early_when_stop_is_set() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.call_later(0.05, stop.set)
    started = loop.time()
    await pause(30.0, stop)
    assert loop.time() - started < 5.0


async def test_pause_sleeps_the_whole_delay_without_stop() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pause(0.05, asyncio.Event())
    await pause(0.05)
    assert loop.time() - started >= 0.09


async def test_a_cancel_that_a_try_swallowed_still_ends_the_retries() -> None:
    # What asyncio.wait_for under aio-pika's connect can do: the try ends in its own error as
    # the cancel arrives, and the cancel is lost. Before: the loop went on to its next try
    # (CI saw a start-up cancelled by SIGTERM go on retrying an unreachable broker).
    tries: list[int] = []
    trying = asyncio.Event()

    async def retrying() -> None:
        async for attempt in Backoff(base=0.001, cap=0.001).attempts(50):
            tries.append(attempt.number)
            trying.set()
            with contextlib.suppress(asyncio.CancelledError):  # swallowed: the try "failed"
                await asyncio.sleep(0.05)  # the try

    task = asyncio.create_task(retrying())
    await trying.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert tries == [1]
