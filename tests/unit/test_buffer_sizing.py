"""The buffer jobq sizes by the settle rate: the rule, its wiring, and the pool's claims."""

from __future__ import annotations

import asyncio
from typing import Any

from jobq import Job
from jobq.config import Settings, load_settings
from jobq.transports.memory import MemoryStore
from jobq.wiring.derived import pool_buffer, pool_buffer_max
from jobq.worker.sizing import CEILING, HOLD, BufferSizer
from tests.unit.test_pool import CountingTransport, make_pool


def settings(**overrides: Any) -> Settings:
    return load_settings(None, overrides, env={})


def test_the_buffer_holds_about_hold_seconds_of_work_between_floor_and_ceiling() -> None:
    sizer = BufferSizer(32, 256, window=0.25)
    assert sizer.measure(0.0, 0) == 32  # nothing measured yet: the floor
    assert sizer.measure(0.125, 2500) == 32  # within the first window: not measured yet
    assert sizer.measure(0.25, 5000) == 256  # 20,000 jobs/s: 1,000 jobs of HOLD, capped
    assert sizer.measure(0.5, 6000) == round(4000 * HOLD)  # 4,000/s: 200
    assert sizer.measure(0.75, 6025) == 32  # 100/s (jobs of 0.3 s at concurrency 32): the floor
    assert sizer.measure(0.875, 9000) == 32  # within the window: kept
    sizer.measure(1.0, 9000)
    assert sizer.measure(2.0, 9000) == 32  # idle: the floor again
    assert not sizer.fixed and BufferSizer(8, 0).fixed and BufferSizer(8, 8).ceiling == 8


def test_only_lease_mode_with_the_buffer_left_to_jobq_grows_it() -> None:
    lease = settings(transport="postgres")
    assert pool_buffer(lease) == 32 and pool_buffer_max(lease) == CEILING
    configured = settings(transport="postgres", **{"consumer.buffer": 8})
    assert pool_buffer_max(configured) == 0  # a configured buffer is kept as it is
    txn = settings(transport="postgres", **{"postgres.claim": "transaction"})
    assert pool_buffer(txn) == 0 and pool_buffer_max(txn) == 0
    rabbit = settings(transport="rabbitmq")
    assert pool_buffer_max(rabbit) == 0  # the prefetch is set once per session
    wide = settings(transport="postgres", **{"consumer.concurrency": 500})
    assert pool_buffer_max(wide) == 500  # never below the floor


async def test_a_pool_of_short_jobs_claims_past_concurrency_plus_buffer() -> None:
    store = MemoryStore()
    for i in range(20_000):
        store.add("k", {"i": i})
    transport = CountingTransport(store)

    async def handler(job: Job) -> None:
        await asyncio.sleep(0)

    stats = await make_pool(transport, handler, buffer_max=200).run()
    assert stats.ok == 20_000
    assert max(transport.asked[:3]) <= 8  # the floor until the rate is measured
    assert max(transport.asked) > 8  # then grown: thousands of jobs/s x HOLD, up to 4 + 200
    assert max(transport.asked) <= 204


async def test_a_pool_of_long_jobs_keeps_the_floor() -> None:
    store = MemoryStore()
    for i in range(40):
        store.add("k", {"i": i})
    transport = CountingTransport(store)

    async def handler(job: Job) -> None:
        await asyncio.sleep(HOLD * 2)  # each job longer than the buffer may hold

    stats = await make_pool(transport, handler, buffer_max=200).run()
    assert stats.ok == 40
    assert max(transport.asked) <= 8
