"""An operator's cancel of a running job (``Transport.cancelled``) over the memory transport."""

from __future__ import annotations

import asyncio
import contextlib
import time

from jobq import Job
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.interrupts import CANCEL_LOOK
from tests.unit.test_pool import make_pool


async def test_a_cancelled_running_job_stops_at_its_next_await_and_ends_cancelled() -> None:
    store = MemoryStore()
    victim, other = store.add("k", {}), store.add("k", {})
    started: dict[str, float] = {}
    finished: list[str] = []
    victim_running = asyncio.Event()

    async def handler(job: Job) -> None:
        started[job.id] = time.monotonic()
        if job.id == victim:
            victim_running.set()
        await asyncio.sleep(0.5 if job.id == other else 30)
        finished.append(job.id)

    pool = make_pool(MemoryTransport(store), handler)
    run = asyncio.create_task(pool.run())
    await victim_running.wait()
    store.entries[victim].cancel_requested = True
    stats = await asyncio.wait_for(run, CANCEL_LOOK + 2)
    assert finished == [other]
    assert store.entries[victim].status == "cancelled"
    assert store.entries[victim].history == ["cancel"]  # never retried
    assert "cancelled by an operator" in (store.entries[victim].last_error or "")
    assert (stats.ok, stats.cancelled, stats.retried, stats.dead) == (1, 1, 0, 0)


async def test_a_handler_that_swallows_the_cancel_and_returns_is_done() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})
    running = asyncio.Event()

    async def handler(job: Job) -> None:
        running.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)

    pool = make_pool(MemoryTransport(store), handler)
    run = asyncio.create_task(pool.run())
    await running.wait()
    store.entries[job_id].cancel_requested = True
    stats = await asyncio.wait_for(run, CANCEL_LOOK + 2)
    assert store.entries[job_id].status == "done" and stats.ok == 1 and stats.cancelled == 0


async def test_a_shutdown_during_a_cancel_still_settles_the_job_once() -> None:
    store = MemoryStore()
    job_id = store.add("k", {})
    running = asyncio.Event()

    async def handler(job: Job) -> None:
        running.set()
        await asyncio.sleep(30)

    pool = make_pool(MemoryTransport(store), handler, once=False, shutdown_timeout=0.2)
    run = asyncio.create_task(pool.run())
    await running.wait()
    store.entries[job_id].cancel_requested = True
    deadline = time.monotonic() + CANCEL_LOOK + 5
    while store.entries[job_id].status == "running":  # the cancel seen and being settled
        assert time.monotonic() < deadline, "the cancel was not seen"
        await asyncio.sleep(0.005)
    pool.stop()
    await asyncio.wait_for(run, 5)
    assert len(store.entries[job_id].history) == 1, store.entries[job_id].history
    assert store.entries[job_id].status == "cancelled"
