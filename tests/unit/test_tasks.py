"""Tasks declared in code: typed arguments checked at enqueue and at run, kinds, options."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest

import jobq
from jobq.core.errors import ConfigError, InvalidArguments
from jobq.transports.memory import MemoryPublisher, MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from jobq.worker.threads import HandlerThreads


@dataclass
class Receipt:
    order_id: int
    to: str


class Refund(pydantic.BaseModel):
    order_id: int
    cents: int = pydantic.Field(gt=0)


async def drain(app: jobq.App, store: MemoryStore) -> None:
    threads = HandlerThreads(2)
    try:
        pool = WorkerPool(MemoryTransport(store), app.consumer_handler(threads),
                          RetryPolicy(jitter=False, base_delay=0.0), concurrency=2, buffer_size=2,
                          job_timeout=5.0, shutdown_timeout=5.0, poll_timeout=0.05, once=True)
        await asyncio.wait_for(pool.run(), 20)
    finally:
        threads.shutdown()


async def test_a_task_enqueues_its_kind_with_its_arguments_and_runs_them_typed() -> None:
    store = MemoryStore()
    app = jobq.App(publisher=MemoryPublisher(store))
    seen: list[tuple[Receipt, int]] = []

    @app.task
    async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
        seen.append((args, ctx.attempt))

    async with app:
        job_id = await send_receipt.enqueue(Receipt(order_id=42, to="a@example.com"))
    assert send_receipt.kind == "send_receipt"
    assert (store.entries[job_id].kind, store.entries[job_id].payload) == (
        "send_receipt", {"order_id": 42, "to": "a@example.com"})
    await drain(app, store)
    assert seen == [(Receipt(order_id=42, to="a@example.com"), 1)]


async def test_arguments_that_would_not_validate_are_refused_at_the_call_and_nothing_is_written(
) -> None:
    store = MemoryStore()
    app = jobq.App(publisher=MemoryPublisher(store))

    @app.task
    async def send_receipt(args: Receipt, ctx: jobq.Context) -> None: ...

    @app.task
    async def refund(args: Refund, ctx: jobq.Context) -> None: ...

    async with app:
        with pytest.raises(InvalidArguments, match=r"Expected `int`, got `str` - at `\$.order_id`"):
            await send_receipt.enqueue(Receipt(order_id="42", to="a"))  # type: ignore[arg-type]
        with pytest.raises(InvalidArguments, match="takes Receipt, got dict"):
            await send_receipt.enqueue({"order_id": 1, "to": "a"})  # type: ignore[arg-type]
        with pytest.raises(InvalidArguments, match="greater than 0"):
            await refund.enqueue(Refund.model_construct(order_id=1, cents=0))
    assert store.entries == {}


async def test_a_payload_that_no_longer_validates_is_dead_at_once_and_an_unknown_kind_too() -> None:
    store = MemoryStore()
    app = jobq.App()
    ran: list[Refund] = []

    @app.task
    async def refund(args: Refund, ctx: jobq.Context) -> None:
        ran.append(args)

    bad = store.add("refund", {"order_id": 7, "cents": -5}, max_attempts=5)
    stray = store.add("email", {})
    good = store.add("refund", {"order_id": 8, "cents": 100})
    await drain(app, store)
    assert ran == [Refund(order_id=8, cents=100)]
    assert store.entries[good].status == "done"
    entry = store.entries[bad]
    assert (entry.status, entry.history) == ("dead", ["dead"])  # one attempt: never retried
    assert entry.last_error is not None and entry.last_error.startswith(
        "InvalidArguments: arguments of 'refund' do not validate as Refund: 1 validation error")
    assert "greater than 0" in entry.last_error
    assert store.entries[stray].last_error == "UnknownKind: no task for kind 'email' (known: refund)"


async def test_options_set_the_attempts_the_queue_and_the_priority() -> None:
    app = jobq.App()

    @app.task(name="mail.receipt", retries=4, queue="mail", priority=2)
    async def send_receipt(args: Receipt, ctx: jobq.Context) -> None: ...

    job = send_receipt.new_job(Receipt(order_id=1, to="a"), delay=3.0)
    assert (job.kind, job.max_attempts, job.priority, job.delay) == ("mail.receipt", 5, 2, 3.0)
    assert send_receipt.options.queue == "mail"
    assert app.tasks == {"mail.receipt": send_receipt}


def test_two_tasks_of_one_kind_and_untyped_arguments_are_refused_when_declared() -> None:
    app = jobq.App()

    @app.task
    async def send(args: Receipt, ctx: jobq.Context) -> None: ...

    with pytest.raises(ConfigError, match="two tasks claim the kind 'send'"):
        app.task(name="send")(send.function)
    with pytest.raises(ConfigError, match="must be a dataclass or a pydantic model, not 'dict'"):
        @app.task
        async def loose(args: dict[str, Any], ctx: jobq.Context) -> None: ...
    with pytest.raises(ConfigError, match="annotate its first parameter"):
        app.task(name="bare")(lambda args, ctx: None)


async def test_a_task_past_its_timeout_fails_the_attempt_and_its_own_timeout_error_is_its_own(
) -> None:
    store = MemoryStore()
    app = jobq.App()

    @app.task(timeout=0.05)
    async def slow(args: Receipt, ctx: jobq.Context) -> None:
        if args.order_id == 1:
            await asyncio.sleep(10)
        raise TimeoutError("the mail server did not answer")

    late = store.add("slow", {"order_id": 1, "to": "a"}, max_attempts=1)
    own = store.add("slow", {"order_id": 2, "to": "a"}, max_attempts=1)
    await drain(app, store)
    assert store.entries[late].last_error == (
        "JobTimeout: task 'slow' ran past its timeout of 0.05s (gave up after 1 of 1 attempts)")
    assert store.entries[own].last_error == (
        "TimeoutError: the mail server did not answer (gave up after 1 of 1 attempts)")


async def test_a_plain_def_task_runs_in_a_handler_thread() -> None:
    store = MemoryStore()
    app = jobq.App()
    threads: list[str] = []

    @app.task
    def archive(args: Receipt, ctx: jobq.Context) -> None:
        threads.append(threading.current_thread().name)

    store.add("archive", {"order_id": 1, "to": "a"})
    await drain(app, store)
    assert len(threads) == 1 and threads[0] != threading.main_thread().name


async def test_enqueue_outside_an_open_app_says_how_to_open_it() -> None:
    app = jobq.App()

    @app.task
    async def send(args: Receipt, ctx: jobq.Context) -> None: ...

    with pytest.raises(ConfigError, match="the app is not open: enqueue inside `async with app:`"):
        await send.enqueue(Receipt(order_id=1, to="a"))


def test_a_consumer_runs_an_app_or_processors_never_both() -> None:
    from jobq.config import ConsumerConfig
    from jobq.worker.routing import build_handler, describe_handler

    consumer = ConsumerConfig(app="tests.tasks_app:app")
    assert callable(build_handler(consumer))
    assert describe_handler(consumer) == "app tests.tasks_app:app"
    with pytest.raises(ConfigError, match=r"set consumer.app .* not both"):
        build_handler(ConsumerConfig(app="tests.tasks_app:app", processor="noop"))
    with pytest.raises(ConfigError, match=r"'tests.tasks_app:Receipt' is not a jobq\.App"):
        build_handler(ConsumerConfig(app="tests.tasks_app:Receipt"))
