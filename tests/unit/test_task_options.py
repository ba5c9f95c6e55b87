"""A task's own options over the config's: backoff, unique key, delay."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

import jobq
from jobq.core.errors import InvalidArguments
from jobq.core.job import Dead, Job, RetryIn
from jobq.transports.memory import MemoryPublisher, MemoryStore
from jobq.worker.retry import RetryPolicy


@dataclass
class Receipt:
    order_id: int
    to: str = "a@example.com"


def job(kind: str, attempt: int) -> Job:
    return Job(id="1", queue="q", kind=kind, payload={}, attempt=attempt, max_attempts=20)


def test_a_tasks_backoff_is_its_own_and_the_others_keep_the_configs() -> None:
    app = jobq.App()

    @app.task(retry_delay=7.0, max_retry_delay=20.0)
    async def patient(args: Receipt, ctx: jobq.Context) -> None: ...

    @app.task(retry_delay=0.5)
    async def brisk(args: Receipt, ctx: jobq.Context) -> None: ...

    @app.task
    async def plain(args: Receipt, ctx: jobq.Context) -> None: ...

    policy = app.consumer_policy(RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=False))
    error = ValueError("again")
    assert [policy.decide(error, job("patient", n)) for n in (1, 2, 3)] == [
        RetryIn(7.0, "ValueError: again"), RetryIn(14.0, "ValueError: again"),
        RetryIn(20.0, "ValueError: again")]  # capped at its own max
    assert policy.decide(error, job("brisk", 4)) == RetryIn(4.0, "ValueError: again")
    assert policy.decide(error, job("brisk", 11)) == RetryIn(300.0, "ValueError: again")
    assert policy.decide(error, job("plain", 1)) == RetryIn(1.0, "ValueError: again")
    assert policy.decide(jobq.PermanentError("no"), job("patient", 1)) == Dead("PermanentError: no")
    bare = RetryPolicy(jitter=False)
    assert jobq.App().consumer_policy(bare) is bare  # no task of its own: the config's as is


async def test_a_unique_template_keys_each_job_by_its_arguments() -> None:
    store = MemoryStore()
    app = jobq.App(publisher=MemoryPublisher(store))

    @app.task(unique="receipt-{order_id}")
    async def send(args: Receipt, ctx: jobq.Context) -> None: ...

    @app.task(unique="receipt-{order}")  # a field the arguments lack
    async def broken(args: Receipt, ctx: jobq.Context) -> None: ...

    assert send.new_job(Receipt(42)).key == "receipt-42"
    assert send.new_job(Receipt(42), key="mine").key == "mine"  # the enqueue's own, over it
    async with app:
        with pytest.raises(InvalidArguments, match=r"unique key 'receipt-\{order\}' cannot be "
                                                   r"made from these arguments: KeyError"):
            await broken.enqueue(Receipt(1))
    assert store.entries == {}  # nothing written


def test_a_tasks_delay_applies_unless_the_job_says_when() -> None:
    app = jobq.App()

    @app.task(delay=30.0)
    async def later(args: Receipt, ctx: jobq.Context) -> None: ...

    assert later.new_job(Receipt(1)).delay == 30.0
    assert later.new_job(Receipt(1), delay=0.0).delay == 0.0
    at = datetime.now(UTC) + timedelta(hours=1)
    timed = later.new_job(Receipt(1), run_at=at)
    assert (timed.delay, timed.run_at) == (0.0, at)


async def test_a_unique_task_enqueued_twice_in_a_test_is_one_job_as_on_postgres() -> None:
    import jobq.testing

    app = jobq.App()
    ran: list[int] = []

    @app.task(unique="receipt-{order_id}")
    async def send(args: Receipt, ctx: jobq.Context) -> None:
        ran.append(args.order_id)

    async with jobq.testing.worker(app) as worker:
        first = await send.enqueue(Receipt(1))
        assert await send.enqueue(Receipt(1)) == first != await send.enqueue(Receipt(2))
        await worker.drain()
        again = await send.enqueue(Receipt(1))  # the first ended: the key is free again
        assert again != first
        await worker.drain()
    assert sorted(ran) == [1, 1, 2]


def test_a_bad_option_or_template_is_refused_with_its_name() -> None:
    app = jobq.App()
    with pytest.raises(jobq.ConfigError, match="retry_delay=nan: a number of seconds >= 0"):
        app.task(retry_delay=float("nan"))
    with pytest.raises(jobq.ConfigError, match=r"delay=-1\.0"):
        app.task(delay=-1.0)

    @app.task(unique="{order_id:05d}-{to:d}")
    async def odd(args: Receipt, ctx: jobq.Context) -> None: ...

    with pytest.raises(InvalidArguments, match="cannot be made from these arguments: ValueError"):
        odd.new_job(Receipt(1))
