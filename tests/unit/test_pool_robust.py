"""Issue 19, item 1: no exception from a handler, the retry decision or a settle kills a worker.

Before, each of these cases left the delivery unsettled and the pool waiting for ever (the
``wait_for`` below is what turns that hang into a failure).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import pytest

from jobq import Job, Retry
from jobq.core.errors import MAX_REASON, describe
from jobq.core.job import Ack, Dead, Decision, Delivery, RetryIn
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


class DriverLikeTransport(MemoryTransport):
    """Refuses a reason the way the real drivers do: not UTF-8-encodable, or holding NUL."""

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        self._check(decision.reason)
        await super().settle(delivery, decision)

    @staticmethod
    def _check(reason: str) -> None:
        reason.encode("utf-8")  # UnicodeEncodeError on a lone surrogate, as psycopg / pamqp
        if "\x00" in reason:
            raise ValueError("PostgreSQL text fields cannot contain NUL (0x00) bytes")


def _pool(transport: MemoryTransport, handler: Any, *, policy: RetryPolicy | None = None,
          observer: Any = None, job_timeout: float | None = 5.0) -> WorkerPool:
    return WorkerPool(transport, handler, policy or RetryPolicy(base_delay=60.0, jitter=False),
                      concurrency=1, buffer_size=1, job_timeout=job_timeout, shutdown_timeout=5.0,
                      poll_timeout=0.01, once=True, observer=observer)


def _five(store: MemoryStore, max_attempts: int = 3) -> list[str]:
    return [store.add("k", {"n": i}, max_attempts=max_attempts) for i in range(5)]


async def _first_fails_others_done(handler_error: BaseException, *, max_attempts: int = 3,
                                   **pool: Any) -> tuple[MemoryStore, list[str], WorkerPool]:
    store = MemoryStore()
    ids = _five(store, max_attempts)

    async def handle(job: Job) -> None:
        if job.payload["n"] == 0:
            raise handler_error

    worker_pool = _pool(DriverLikeTransport(store), handle, **pool)
    await asyncio.wait_for(worker_pool.run(), 5)  # before: hung for ever
    assert [store.entries[i].status for i in ids[1:]] == ["done"] * 4
    return store, ids, worker_pool


async def test_a_reason_with_a_lone_surrogate_is_escaped_and_the_job_retried() -> None:
    store, ids, pool = await _first_fails_others_done(FileNotFoundError(os.fsdecode(b"/in/\xff.csv")))
    first = store.entries[ids[0]]
    assert first.status == "pending" and pool.stats.retried == 1
    assert first.last_error == "FileNotFoundError: /in/\\udcff.csv"


async def test_a_reason_with_nul_is_escaped_and_the_job_dead_lettered() -> None:
    store, ids, _ = await _first_fails_others_done(ValueError("a\x00b"), max_attempts=1)
    first = store.entries[ids[0]]
    assert first.status == "dead"
    assert first.last_error is not None and first.last_error.startswith("ValueError: a\\x00b")


async def test_a_cancelled_error_raised_by_the_handler_is_a_failure_of_its_job() -> None:
    store, ids, pool = await _first_fails_others_done(asyncio.CancelledError())
    first = store.entries[ids[0]]
    assert first.status == "pending" and pool.stats.retried == 1
    assert first.last_error is not None and first.last_error.startswith("HandlerCancelled: ")


async def test_a_wrong_typed_retry_delay_falls_back_to_the_backoff() -> None:
    store, ids, pool = await _first_fails_others_done(Retry(delay="soon"))  # type: ignore[arg-type]
    first = store.entries[ids[0]]
    assert first.status == "pending" and pool.stats.retried == 1
    assert first.run_at > time.monotonic() + 30  # the policy's backoff (60 s), not at once
    assert first.last_error is not None
    assert first.last_error.startswith("Retry: retry requested (delay=soon) (the retry decision "
                                       "failed: ValueError: could not convert string to float")


class BrokenPolicy(RetryPolicy):
    """A policy whose decision always raises."""

    def decide(self, error: BaseException, job: Job) -> RetryIn | Dead:
        raise RuntimeError("decide is broken")


async def test_a_failing_decision_retries_with_backoff_then_gives_up_when_attempts_are_spent() -> None:
    policy = BrokenPolicy(base_delay=0.0, jitter=False)
    store, ids, pool = await _first_fails_others_done(ValueError("boom"), policy=policy,
                                                      max_attempts=2)
    first = store.entries[ids[0]]
    assert first.status == "dead" and first.attempts == 2  # retried once (delay 0), then dead
    assert pool.stats.retried == 1 and pool.stats.dead == 1
    assert first.last_error == ("ValueError: boom (the retry decision failed: RuntimeError: "
                                "decide is broken; gave up after 2 of 2 attempts)")


class AckBug(MemoryTransport):
    """An ack that fails with something other than a TransportError (a bug below the pool)."""

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        if isinstance(decision, Ack) and delivery.job.payload["n"] == 0:
            raise KeyError("handle")
        await super().settle(delivery, decision)


async def test_a_settle_raising_a_non_transport_error_is_logged_with_traceback_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    ids = _five(store)

    async def handle(job: Job) -> None:
        return None

    pool = _pool(AckBug(store), handle)
    with caplog.at_level(logging.ERROR, "jobq.pool"):
        await asyncio.wait_for(pool.run(), 5)
    assert [store.entries[i].status for i in ids[1:]] == ["done"] * 4
    assert pool.stats.settle_failures == 1 and pool.in_flight == 0
    failed = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert pool.stats.worker_deaths == 0


class FailingObserver:
    """Metrics with a bug: the first ``settled`` raises."""

    def __init__(self) -> None:
        self.calls = 0

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        self.calls += 1
        if self.calls == 1:
            raise ZeroDivisionError("observer bug")

    def gauges(self, in_flight: int, buffered: int) -> None:
        return None


async def test_a_worker_that_dies_is_logged_and_replaced(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    ids = _five(store)

    async def handle(job: Job) -> None:
        return None

    pool = _pool(MemoryTransport(store), handle, observer=FailingObserver())
    with caplog.at_level(logging.ERROR, "jobq.pool"):
        await asyncio.wait_for(pool.run(), 5)  # before: the only worker was gone; hung
    assert [store.entries[i].status for i in ids] == ["done"] * 5
    assert pool.stats.worker_deaths == 1
    died = [r for r in caplog.records if "worker 0 died" in r.getMessage()]
    assert len(died) == 1 and died[0].exc_info is not None


async def test_the_job_a_dead_worker_held_is_settled_as_a_failure_by_its_replacement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    ids = _five(store)

    async def handle(job: Job) -> None:
        return None

    pool = _pool(MemoryTransport(store), handle)
    real = pool._settler.settle
    calls = 0

    async def settle_dies_once(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("died before settling")
        await real(*args)

    monkeypatch.setattr(pool._settler, "settle", settle_dies_once)
    await asyncio.wait_for(pool.run(), 5)
    first = store.entries[ids[0]]
    assert first.status == "pending" and pool.stats.retried == 1 and pool.stats.ok == 4
    assert first.last_error == ("WorkerDied: the worker running the job died: RuntimeError: "
                                "died before settling")


def test_describe_is_safe_for_every_driver() -> None:
    assert describe(FileNotFoundError(os.fsdecode(b"/in/\xff.csv"))) == (
        "FileNotFoundError: /in/\\udcff.csv")
    assert describe(ValueError("a\x00b")) == "ValueError: a\\x00b"
    assert describe(ValueError("é ok")) == "ValueError: é ok"  # valid text is kept as it is
    long = describe(ValueError("\udcff" * 10_000))
    long.encode("utf-8")
    assert len(long) <= 2 * MAX_REASON + 3

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(Unprintable()) == "Unprintable: <unprintable message: RuntimeError>"


async def test_the_observer_hears_only_of_decisions_carried_out() -> None:
    store = MemoryStore()
    ids = _five(store)
    heard: list[object] = []

    class Observer:
        def settled(self, decision: Decision, duration: float, error: BaseException | None,
                    job: Job) -> None:
            heard.append(job.payload["n"])

        def gauges(self, in_flight: int, buffered: int) -> None:
            return None

    async def handle(job: Job) -> None:
        return None

    pool = _pool(AckBug(store), handle, observer=Observer())
    await asyncio.wait_for(pool.run(), 5)
    assert pool.stats.settle_failures == 1 and len(ids) == 5
    assert sorted(heard) == [1, 2, 3, 4]  # job 0's ack failed: it comes again, not counted now
    # Nor is it ok in the stats (the stop summary): it counted both ways before.
    assert pool.stats.ok == 4

