"""A paused queue: no job starts, the unstarted go back, nothing is asked for; resume runs the rest."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from jobq import Job
from jobq.core.job import Delivery
from jobq.observability.metrics import Metrics
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pausing import PauseWatch
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until

LOOK = 0.02  # the watch's interval in these tests (a second in a consumer)


class Recording(MemoryTransport):
    """Records when each receive was asked for."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.receives: list[float] = []

    async def receive(self, max_count: int, timeout: float) -> list[Delivery]:
        self.receives.append(time.monotonic())
        return await super().receive(max_count, timeout)


class Switch:
    """The server's pause, as the probe reads it."""

    def __init__(self, paused: bool = False) -> None:
        self.paused = paused
        self.looks = 0

    async def __call__(self) -> bool:
        self.looks += 1
        return self.paused


def make(transport: MemoryTransport, handler: Any, switch: Switch, *,
         heard: Callable[[bool], None] | None = None, **kw: Any) -> WorkerPool:
    """A pool whose pause watch asks ``switch``; ``heard``, if given, hears what the pool
    hears, in the same turn of the loop."""
    opts: dict[str, Any] = {"concurrency": 2, "buffer_size": 4, "job_timeout": 5.0,
                            "shutdown_timeout": 5.0, "poll_timeout": 0.05, "once": False}
    opts.update(kw)
    watch = PauseWatch(switch, interval=LOOK)
    if heard is not None:
        watch.listen(heard)
    return WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False),
                      pause=watch, **opts)


async def test_pause_lets_running_jobs_finish_hands_back_the_rest_and_resume_runs_them() -> None:
    store = MemoryStore()
    for i in range(30):
        store.add("k", {"i": i})
    transport = Recording(store)
    switch = Switch()
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}

    async def handler(job: Job) -> None:
        assert job.id not in starts, f"job {job.id} started twice"
        starts[job.id] = time.monotonic()
        await asyncio.sleep(0.05)
        ends[job.id] = time.monotonic()

    started_when_heard: list[int] = []

    def heard(paused: bool) -> None:
        if paused:  # the pool hears it in this same turn: no handler runs in between
            started_when_heard.append(len(starts))

    metrics = Metrics("memory", "q")
    pool = make(transport, handler, switch, heard=heard, stall_timeout=0.1)
    metrics.watch(pool, transport)
    run = asyncio.create_task(pool.run())
    await until(lambda: len(ends) >= 4 and pool.in_flight == 6, "work under way, buffer full")
    switch.paused = True
    await until(lambda: pool.paused and pool.in_flight == 0, "running jobs to finish")
    asked, looks = len(transport.receives), switch.looks
    # Paused for ten more looks, each LOOK after the one before: longer than stall_timeout,
    # however slow the machine (it only makes them later).
    await until(lambda: switch.looks >= looks + 10, "ten more looks while paused")

    # Nothing started once the pool heard the pause (counted, not timed: how soon it hears
    # is a look away, which a loaded machine stretches), nothing runs now, the unstarted
    # went back (attempt not counted), and the pool neither spun nor asked.
    assert started_when_heard == [len(starts)]
    assert set(starts) == set(ends)
    assert ("quiesce", "") in transport.calls
    released = [job_id for call, job_id in transport.calls if call == "release"]
    assert released and all(store.entries[i].attempts == 0 for i in released)
    assert len(store.by_status("pending")) == 30 - len(ends)
    assert len(transport.receives) == asked
    assert pool.problem(time.monotonic()) is None  # /healthz stays green while paused
    assert metrics.registry.get_sample_value("jobq_queue_paused",
                                             {"transport": "memory", "queue": "q"}) == 1.0

    switch.paused = False
    await until(lambda: len(ends) == 30, "the rest to run after the resume")
    assert ("resume", "") in transport.calls and not pool.paused
    pool.stop()
    stats = await run
    assert stats.ok == 30 and stats.released == len(released)
    assert all(e.history[-1] == "ack" and e.history.count("ack") == 1
               for e in store.entries.values())
    assert metrics.registry.get_sample_value("jobq_queue_paused",
                                             {"transport": "memory", "queue": "q"}) == 0.0


async def test_once_on_a_paused_queue_takes_nothing_and_exits(caplog: pytest.LogCaptureFixture
                                                              ) -> None:
    store = MemoryStore()
    for i in range(5):
        store.add("k", {"i": i})
    transport = Recording(store)
    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    with caplog.at_level(logging.INFO, logger="jobq.pool"):
        stats = await asyncio.wait_for(make(transport, handler, Switch(paused=True),
                                             once=True).run(), 2)
    assert stats.settled == 0 and not ran and not transport.receives
    assert len(store.by_status("pending")) == 5
    assert "nothing more to do (--once)" in caplog.text


async def test_a_stop_while_paused_stops_at_once() -> None:
    transport = Recording(MemoryStore())

    async def handler(job: Job) -> None:
        raise AssertionError("nothing runs")

    pool = make(transport, handler, Switch(paused=True))
    run = asyncio.create_task(pool.run())
    await until(lambda: pool.paused, "the pause to be seen")
    pool.stop()
    # A deadline, not a wall-clock bound: a stop that waited for the pause to end would never
    # return, and one that waited out shutdown_timeout (5 s) would miss it.
    await asyncio.wait_for(run, 2)
    assert not transport.receives


async def test_a_failing_look_keeps_the_last_answer_and_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    answers: list[bool | Exception] = [True, RuntimeError("server gone"), RuntimeError("still"),
                                       False]

    async def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    heard: list[bool] = []
    watch = PauseWatch(probe, interval=LOOK)
    watch.listen(heard.append)
    with caplog.at_level(logging.WARNING, logger="jobq.pause"):
        assert [await watch.check() for _ in range(4)] == [True, True, True, False]
    assert heard == [True, False]  # changes only
    assert caplog.text.count("could not tell whether the queue is paused") == 1


class Isolating(Recording):
    """Every delivery is to run alone (as after a crash of its consumer)."""

    def _deliver(self, entry: Any) -> Delivery:
        delivery = super()._deliver(entry)
        delivery.isolate = True
        return delivery


async def test_a_pause_during_runs_alone_waits_for_the_one_running_and_keeps_them_alone() -> None:
    store = MemoryStore()
    for i in range(4):
        store.add("k", {"i": i})
    transport = Isolating(store)
    switch = Switch()
    running: list[str] = []
    overlaps: list[list[str]] = []
    ends: list[str] = []

    async def handler(job: Job) -> None:
        running.append(job.id)
        if len(running) > 1:
            overlaps.append(list(running))
        if not ends:
            # The first runs until the pool has heard the pause: a run alone over before
            # that (a look late on a loaded machine) would let the next one start.
            await until(lambda: pool.paused, "the pause heard")
        else:
            await asyncio.sleep(0.1)  # long enough for another to start beside it, if let
        running.remove(job.id)
        ends.append(job.id)

    pool = make(transport, handler, switch)
    run = asyncio.create_task(pool.run())
    await until(lambda: running, "the first run alone")
    switch.paused = True
    await until(lambda: pool.paused and pool.in_flight == 0, "the run alone to end")
    assert len(ends) == 1  # the one running finished; the others went back unstarted
    assert len(store.by_status("pending")) == 3
    switch.paused = False
    await until(lambda: len(ends) == 4, "the rest, each alone")
    pool.stop()
    await run
    assert not overlaps
