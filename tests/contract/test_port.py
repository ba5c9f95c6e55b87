"""The port contract: every promise of ``Transport``, kept by each of the five consumer backends.

One suite, parametrized over memory, PostgreSQL lease and transaction mode, RabbitMQ quorum
and classic (River's ``riverdrivertest`` is the model): in order and by priority, each
decision carried out once, a lost consumer's jobs back, attempts counted, quiesce and
resume, a graceful stop handing back what did not start, an operator's cancel, and a fact
turned into a dead letter with its reason. Each test drives the port in process (a
``WorkerPool`` where the promise is the pool's with the transport), on a queue and schema of
its own. What only one backend does is tested beside it, in tests/integration.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from jobq.core.attempts import ERRORS_KEPT
from jobq.core.job import Ack, Cancelled, Dead, Delivery, Job, Release, RetryIn
from jobq.core.port import NewJob, Transport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import until
from tests.contract.ports import BACKENDS, PRIORITIES, Port

WAIT = 20.0  # the longest a promise may take here: a lost lease (1 s) or pick (2 s), a tier


@contextlib.asynccontextmanager
async def opened(request: pytest.FixtureRequest, queue: str) -> AsyncIterator[Port]:
    """The backend ``request.param`` on ``queue`` (and for PostgreSQL a schema) of its own."""
    name: str = request.param
    schema = request.getfixturevalue("schema") if name.startswith("postgres") else None
    if name.startswith("rabbitmq"):
        request.getfixturevalue("amqp_url")
    async with Port(name, queue, schema) as backend:
        yield backend


@pytest.fixture(params=BACKENDS)
async def port(request: pytest.FixtureRequest, queue_name: str) -> AsyncIterator[Port]:
    """The backend under test."""
    async with opened(request, queue_name) as backend:
        yield backend


@pytest.fixture(params=PRIORITIES)
async def prioritised(request: pytest.FixtureRequest, queue_name: str) -> AsyncIterator[Port]:
    """A backend that hands out a higher priority first (a RabbitMQ quorum queue does not)."""
    async with opened(request, queue_name) as backend:
        yield backend


def job(n: int, **options: Any) -> NewJob:
    return NewJob(kind="k", payload={"n": n}, **options)


def n(delivery: Delivery) -> int:
    return int(delivery.job.payload["n"])


async def receive(transport: Transport, count: int, *, most: int | None = None) -> list[Delivery]:
    """``count`` deliveries, asking for at most ``most`` at a time; fails after WAIT."""
    got: list[Delivery] = []
    deadline = time.monotonic() + WAIT
    while len(got) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"received {len(got)} of {count}: {[d.job.id for d in got]}"
        got += await transport.receive(min(most or count, count - len(got)), min(left, 0.5))
    return got


async def ack_each(transport: Transport, count: int) -> list[Delivery]:
    """Receive and ack until ``count`` came, one batch at a time: a job that comes back as a
    crash's (RabbitMQ: one in flight as a consumer stopped) is handed out only once nothing
    else is out."""
    seen: list[Delivery] = []
    deadline = time.monotonic() + WAIT
    while len(seen) < count:
        assert time.monotonic() < deadline, f"came back: {[d.job.id for d in seen]}"
        for delivery in await transport.receive(count - len(seen), 0.5):
            seen.append(delivery)
            await transport.settle(delivery, Ack())
    return seen


async def nothing_more(transport: Transport) -> None:
    assert await transport.receive(10, 1.0) == []


def pool(port: Port, transport: Transport, handler: Callable[[Job], Any], *,
         concurrency: int = 2, once: bool = False) -> WorkerPool:
    async def handle(job: Job) -> None:
        await handler(job)

    buffer = 0 if port.name == "postgres-transaction" else 4  # transaction mode keeps none
    return WorkerPool(transport, handle, RetryPolicy(base_delay=0.0, jitter=False),
                      concurrency=concurrency, buffer_size=buffer, job_timeout=None,
                      shutdown_timeout=5.0, poll_timeout=0.2, drain_timeout=port.drain_timeout(),
                      once=once)


async def one_at_a_time(transport: Transport, count: int) -> list[Delivery]:
    """``count`` deliveries as one worker takes them: each acked before the next is asked for
    (jobs taken together may be handed out in any order: transaction mode takes each of a
    batch on a connection of its own)."""
    got: list[Delivery] = []
    for _ in range(count):
        (delivery,) = await receive(transport, 1)
        got.append(delivery)
        await transport.settle(delivery, Ack())
    return got


async def test_jobs_come_in_the_order_they_were_enqueued(port: Port) -> None:
    await port.enqueue(*(job(i) for i in range(6)))
    async with port.consumer() as transport:
        got = await one_at_a_time(transport, 6)
        assert [n(d) for d in got] == list(range(6))
        assert all(d.job.attempt == 1 and not d.isolate for d in got)
        await nothing_more(transport)


async def test_a_higher_priority_comes_first(prioritised: Port) -> None:
    # Equal priorities above 0 too, over two enqueues: PostgreSQL claims those apart from the
    # priority-0 jobs, and must keep their order there as well.
    await prioritised.enqueue(job(0), job(1, priority=3), job(2), job(3, priority=7),
                              job(4, priority=3), job(5), job(6, priority=7))
    await prioritised.enqueue(job(7, priority=3), job(8, priority=9), job(9))
    async with prioritised.consumer() as transport:
        got = await one_at_a_time(transport, 10)
        assert [n(d) for d in got] == [8, 3, 6, 1, 4, 7, 0, 2, 5, 9]  # by priority, then in order


async def test_each_decision_is_carried_out_once(port: Port) -> None:
    ids = await port.enqueue(*(job(i) for i in range(5)))
    async with port.consumer() as transport:
        got = sorted(await receive(transport, 5), key=n)
        for delivery, decision in zip(got, [Ack(), RetryIn(0.0, "ValueError: again"),
                                            Dead("PermanentError: no"),
                                            Cancelled("cancelled by an operator"), Release()],
                                      strict=True):
            await transport.settle(delivery, decision)
        # Retried: once more, its attempt counted; released: once more, its attempt not.
        again = sorted(await receive(transport, 2), key=n)
        assert [(n(d), d.job.attempt) for d in again] == [(1, 2), (4, 1)]
        for delivery in again:
            await transport.settle(delivery, Ack())
        await nothing_more(transport)  # acked, dead and cancelled: never again
    assert await port.dead() == {ids[2]: "PermanentError: no"}


async def test_a_lost_consumers_jobs_come_back_and_are_not_lost(port: Port) -> None:
    ids = await port.enqueue(*(job(i) for i in range(3)))
    async with port.consumer() as lost:
        assert len(await receive(lost, 3)) == 3  # closed with all three unsettled
    async with port.consumer() as transport:
        seen = {d.job.id: d.job.attempt for d in await ack_each(transport, 3)}
        assert sorted(seen) == sorted(ids)
        assert all(attempt <= 2 for attempt in seen.values()), seen
        await nothing_more(transport)
    assert await port.dead() == {}


async def test_attempts_are_counted_until_the_job_is_dead(port: Port) -> None:
    (job_id,) = await port.enqueue(job(0, max_attempts=3))
    attempts: list[int] = []

    async def failing(job: Job) -> None:
        attempts.append(job.attempt)
        raise ValueError("boom")

    async with port.consumer() as transport:
        workers = pool(port, transport, failing)
        run = asyncio.create_task(workers.run())
        await until(lambda: workers.stats.dead == 1, "the job dead", WAIT)
        workers.stop()
        stats = await run
    assert attempts == [1, 2, 3] and (stats.retried, stats.dead) == (2, 1)
    assert await port.dead() == {job_id: "ValueError: boom (gave up after 3 of 3 attempts)"}


async def test_each_failed_attempts_error_is_kept_with_the_job_the_latest_ones(port: Port) -> None:
    attempts = ERRORS_KEPT + 2
    (job_id,) = await port.enqueue(job(0, max_attempts=attempts))

    async def failing(job: Job) -> None:
        raise ValueError(f"boom {job.attempt}")

    async with port.consumer() as transport:
        workers = pool(port, transport, failing)
        run = asyncio.create_task(workers.run())
        await until(lambda: workers.stats.dead == 1, "the job dead", WAIT)
        workers.stop()
        await run
    errors = await port.errors(job_id)
    assert [(e.attempt, e.type, e.message) for e in errors] == [
        (a, "ValueError", f"boom {a}") for a in range(3, attempts + 1)]  # the oldest two dropped
    assert all(e.traceback and 'raise ValueError(f"boom {job.attempt}")' in e.traceback
               for e in errors), errors[-1].traceback
    assert [e.at for e in errors] == sorted(e.at for e in errors)


async def test_quiesce_hands_back_what_was_taken_and_resume_takes_again(port: Port) -> None:
    await port.enqueue(*(job(i) for i in range(4)))
    async with port.consumer() as transport:
        got = await receive(transport, 2, most=2)
        await transport.quiesce()  # as at a pause: the pool hands back what it received
        for delivery in got:
            await transport.settle(delivery, Release())
        async with port.consumer() as other:  # all four are the queue's again, none started
            back = sorted(await receive(other, 4), key=n)
            assert [(n(d), d.job.attempt) for d in back] == [(i, 1) for i in range(4)]
            for delivery in back:
                await other.settle(delivery, Ack())
        await transport.resume()
        await port.enqueue(job(4))
        (later,) = await receive(transport, 1)
        assert n(later) == 4
        await transport.settle(later, Ack())


async def test_a_graceful_stop_hands_back_what_did_not_start(port: Port) -> None:
    await port.enqueue(*(job(i) for i in range(6)))
    started: list[int] = []
    finish = asyncio.Event()

    async def slow(job: Job) -> None:
        started.append(n_of(job))
        await finish.wait()

    async with port.consumer() as transport:
        workers = pool(port, transport, slow, concurrency=1)
        run = asyncio.create_task(workers.run())
        await until(lambda: started, "the first job to start", WAIT)
        workers.stop()
        finish.set()
        stats = await run
    assert started == [0] and stats.ok == 1
    async with port.consumer() as transport:  # the five back, none started, none counted
        rest = sorted(await ack_each(transport, 5), key=n)
        assert [(n(d), d.job.attempt) for d in rest] == [(i, 1) for i in range(1, 6)]
        await nothing_more(transport)


async def test_an_operators_cancel_stops_a_running_job_for_good(port: Port) -> None:
    (job_id,) = await port.enqueue(job(0))
    started = asyncio.Event()

    async def endless(job: Job) -> None:
        started.set()
        await asyncio.sleep(WAIT * 3)

    async with port.consumer() as transport:
        workers = pool(port, transport, endless)
        run = asyncio.create_task(workers.run())
        await asyncio.wait_for(started.wait(), WAIT)
        await port.cancel(job_id)
        await until(lambda: workers.stats.cancelled == 1, "the cancel to stop the job", WAIT)
        workers.stop()
        stats = await run
        assert (stats.ok, stats.cancelled, stats.retried, stats.dead) == (0, 1, 0, 0)
        await nothing_more(transport)
    assert await port.dead() == {}


async def test_a_job_no_consumer_can_decode_is_dead_with_its_reason_and_never_runs(
        port: Port) -> None:
    bad = await port.store_malformed()
    (good,) = await port.enqueue(job(0))
    ran: list[str] = []

    async def record(job: Job) -> None:
        ran.append(job.id)

    async with port.consumer() as transport:
        workers = pool(port, transport, record)
        run = asyncio.create_task(workers.run())
        await until(lambda: workers.stats.ok == 1 and workers.stats.dead == 1, "both settled",
                    WAIT)
        workers.stop()
        await run
    assert ran == [good]
    dead = await port.dead()
    assert list(dead) == [bad] and dead[bad].startswith("MalformedJob: "), dead


def n_of(job: Job) -> int:
    return int(job.payload["n"])
