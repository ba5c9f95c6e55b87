"""Crash redeliveries on RabbitMQ without a broker: the copy decision, and <q>.alone's runs alone."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from types import SimpleNamespace
from typing import Any, Literal

from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.job import Ack, Dead, Job, Release, RetryIn, Spent
from jobq.transports.rabbitmq.acks import AckTracker
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.crashes import crash_copy


def job(attempt: int, max_attempts: int = 3) -> Job:
    return Job(id="1", queue="q", kind="k", payload={}, attempt=attempt, max_attempts=max_attempts)


def test_an_unmarked_crash_redelivery_is_refunded() -> None:
    assert crash_copy(job(2), isolated=False).attempt == 2
    assert crash_copy(job(3), isolated=False).dead is None  # even on its last attempt


def test_a_first_strike_goes_back_refunded_as_a_suspect() -> None:
    first = crash_copy(job(3), isolated=False, first=True)
    assert (first.attempt, first.suspect, first.dead) == (3, True, None)  # even on its last
    assert not crash_copy(job(1), isolated=False).suspect


def test_a_marked_one_ran_alone_so_the_crash_counts_until_it_is_dead() -> None:
    assert (crash_copy(job(1), isolated=True).attempt, crash_copy(job(1), isolated=True).dead) == (2, None)
    last = crash_copy(job(3), isolated=True)
    assert last.attempt == 3  # the attempts it had: what the dead letter reports
    assert last.dead is not None and last.dead.startswith(
        "lost mid-job: killed or stalled its consumer while running alone on attempt 3 of 3")


class FakeSession:
    """A live session: records publishes and acks; ``<q>.alone`` is a list basic.get pops."""

    alive = True

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.completed: list[int] = []  # acks sent
        self.ack_delay = 0.0  # > 0: an ack goes out this long after its completion
        self.alone: list[Any] = []  # what basic.get on q.alone hands out, in order
        self.gets = 0
        self.consumer_tag: str | None = "ctag-1"
        self.sender = SimpleNamespace(basic_publish=self._publish)
        self.raw = SimpleNamespace(basic_get=self._get)
        self.tracker = AckTracker()
        self.holding = False
        self.last_ack = 0.0
        self.wake = asyncio.Event()
        self._tags = 100

    async def _publish(self, body: bytes, **kwargs: Any) -> None:
        self.published.append({"body": body, **kwargs})
        if kwargs["routing_key"] == "q.alone":  # the copy lands in the alone queue
            self._tags += 1
            props = kwargs["properties"]
            self.alone.append(SimpleNamespace(body=body, header=SimpleNamespace(properties=props),
                                              delivery=SimpleNamespace(delivery_tag=self._tags,
                                                                       redelivered=False)))

    async def _get(self, queue: str, *, no_ack: bool, timeout: float) -> Any:
        assert queue == "q.alone" and not no_ack
        self.gets += 1
        return self.alone.pop(0) if self.alone else SimpleNamespace(delivery=Basic.GetEmpty())

    def complete(self, tag: int) -> None:
        if not self.ack_delay:
            self.completed.append(tag)
            return
        self.tracker.complete(tag)
        asyncio.get_running_loop().call_later(self.ack_delay, self._send)

    def _send(self) -> None:  # as the ack loop: every completed tag's ack goes out
        self.completed += self.tracker.stragglers()

    def hold_acks(self) -> None:
        self.holding = True

    def send_acks(self) -> None:
        self.holding = False


def message(tag: int, *, redelivered: bool = False, **headers: Any) -> Any:
    props = Basic.Properties(message_id=f"job-{tag}", message_type="k", headers={
        "x-jobq-attempt": 1, "x-jobq-max-attempts": 3, **headers})
    return SimpleNamespace(body=b"{}", header=SimpleNamespace(properties=props),
                           delivery=SimpleNamespace(delivery_tag=tag, redelivered=redelivered))


async def consuming(settings: RabbitConfig | None = None) -> tuple[RabbitTransport, FakeSession]:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    transport = RabbitTransport(link, settings or RabbitConfig(), queue="q", prefetch=8,
                                max_attempts=3)
    session = FakeSession()
    transport._sessions.current = session  # type: ignore[assignment]
    transport._sessions.resumed.set()
    return transport, session


async def arrive(transport: RabbitTransport, session: FakeSession, *messages: Any) -> None:
    for m in messages:
        await transport._on_message(session, m)  # type: ignore[arg-type]
    await asyncio.gather(*transport._tasks)


def slow_gets(session: FakeSession) -> tuple[asyncio.Event, asyncio.Event]:
    """basic.get answers only once the second event is set; the first is set when it asks."""
    asked, answer = asyncio.Event(), asyncio.Event()
    plain_get = session._get

    async def slow_get(queue: str, *, no_ack: bool, timeout: float) -> Any:
        asked.set()
        await answer.wait()
        return await plain_get(queue, no_ack=no_ack, timeout=timeout)

    session.raw = SimpleNamespace(basic_get=slow_get)
    return asked, answer


def headers(published: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = published["properties"].headers
    return result


async def test_crash_redeliveries_on_the_work_queue_go_to_the_alone_queue_uncharged() -> None:
    transport, session = await consuming()
    await arrive(transport, session,
                 message(1, redelivered=True, **{"x-jobq-attempt": 2}),  # classic
                 message(2, **{"x-delivery-count": 1}),  # quorum
                 # Marked copies an older jobq put on the work queue: moved, never charged
                 # (held in a prefetch buffer, they may never have run).
                 message(3, redelivered=True, **{"x-jobq-attempt": 3, "x-jobq-isolate": 1}),
                 message(4, **{"x-jobq-attempt": 2, "x-jobq-isolate": 1}))

    assert transport._inbox.arrived == collections.deque()  # none of them runs from the work queue
    copies = {p["properties"].message_id: p for p in session.published}
    assert {copies[f"job-{n}"]["routing_key"] for n in (1, 2, 3, 4)} == {"q.alone"}
    assert [headers(copies[f"job-{n}"])["x-jobq-attempt"] for n in (1, 2, 3, 4)] == [2, 1, 3, 2]
    assert all(headers(copies[f"job-{n}"])["x-jobq-isolate"] == 1 for n in (1, 2, 3, 4))
    assert sorted(session.completed) == [1, 2, 3, 4]  # each original acked once copied


async def test_alone_copies_are_taken_one_at_a_time_beside_the_work() -> None:
    transport, session = await consuming()
    await arrive(transport, session, message(1))
    (plain,) = await transport.receive(10, 0.01)
    session.alone += [message(5, redelivered=True, **{"x-jobq-isolate": 1}),  # ran alone: charged
                      message(6, redelivered=True, **{"x-jobq-attempt": 3, "x-jobq-isolate": 1}),
                      message(7, **{"x-jobq-isolate": 1})]
    transport._solo.alone.due = True  # as the watcher finds it
    await arrive(transport, session, message(3))

    # A copy is taken while job-1 is still out: suspects run beside the work (job-1 included).
    # job-6's crash used up its attempts: not copied, but handed to the pool with that fact,
    # which decides it (dead, with the transport's reason) and never runs it.
    (spent,) = await transport.receive(10, 0.01)
    assert spent.job.id == "job-6" and isinstance(spent.fact, Spent)
    assert "job-6" not in {p["properties"].message_id for p in session.published}
    (work,) = await transport.receive(10, 0.01)  # one copy out: the work queue's turn
    assert work.job.id == "job-3" and not work.isolate
    assert await transport.receive(10, 0.01) == []  # nothing more: the copy out is not settled
    await transport.settle(spent, Dead(spent.fact.reason))
    (alone,) = await transport.receive(10, 0.01)  # its settle lets the next one be taken

    assert alone.isolate and alone.job.id == "job-7"
    copies = {p["properties"].message_id: p for p in session.published}
    assert (copies["job-5"]["routing_key"], headers(copies["job-5"])["x-jobq-attempt"]) == ("q.alone", 2)
    dead = headers(copies["job-6"])
    assert copies["job-6"]["exchange"] == "q.dlx" and "x-jobq-isolate" not in dead
    assert dead["x-jobq-error"].startswith("lost mid-job: killed or stalled its consumer while running alone")
    assert await transport.receive(10, 0.01) == []  # one copy out at a time
    await transport.settle(alone, RetryIn(0, "failed cleanly"))
    assert "x-jobq-isolate" not in headers(session.published[-1])  # a clean failure: unmarked
    assert session.published[-1]["routing_key"] == "q"

    (again,) = await transport.receive(10, 0.01)  # job-5's charged copy, next
    assert again.isolate and (again.job.id, again.job.attempt) == ("job-5", 2)
    await transport.settle(again, Release())  # handed back at shutdown: to q.alone, mark and attempt kept
    assert session.published[-1]["routing_key"] == "q.alone"
    session.alone.clear()
    for delivery in (plain, work):
        await transport.settle(delivery, Ack())
    assert await transport.receive(10, 0.01) == []  # q.alone empty: back to the work queue only
    assert not transport._solo.alone.due


async def test_alone_copies_due_while_reconnecting_do_not_make_receive_spin() -> None:
    # Seen in the fault suite: with <q>.alone due and the session lost, receive returned []
    # without awaiting anything; the pool asked again at once, the event loop never ran the
    # supervisor again, and the consumer hung (a SIGTERM could not end it).
    transport, session = await consuming()
    transport._solo.alone.due = True
    session.alive = False  # type: ignore[misc]
    transport._sessions.resumed.clear()
    receiving = asyncio.ensure_future(transport.receive(10, 0.05))
    ticks = 0
    for _ in range(20):  # the loop keeps turning while receive waits for a new session
        await asyncio.sleep(0.01)
        ticks += 1
    assert not receiving.done() and ticks == 20
    receiving.cancel()


class CountingEvent(asyncio.Event):
    """An Event whose wait() is counted; past 1,000 calls something is spinning on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    async def wait(self) -> Literal[True]:
        self.waits += 1
        if self.waits > 1000:
            raise RuntimeError("spinning on a set event")
        return await super().wait()


async def test_a_session_that_ended_before_the_supervisor_noticed_does_not_make_receive_spin() -> None:
    # Seen in the fault suite: a failed basic.get ended the session; `_resumed` was still set
    # (the supervisor had not run yet), its wait() returned without yielding, and receive spun.
    transport, session = await consuming()
    transport._sessions.resumed = resumed = CountingEvent()
    resumed.set()
    session.alive = False  # type: ignore[misc]
    receiving = asyncio.ensure_future(transport.receive(10, 0.05))
    await asyncio.sleep(0.2)  # the loop turns: receive waits for a live session
    assert not receiving.done() and resumed.waits < 20
    session.alive = True  # type: ignore[misc]
    await transport._on_message(session, message(9))  # type: ignore[arg-type]
    (delivery,) = await asyncio.wait_for(receiving, 1.0)
    assert delivery.job.id == "job-9"


async def test_a_receive_cancelled_during_basic_get_gives_the_copy_back() -> None:
    # A basic.get cancelled half-way closes aiormq's channel when its answer comes; the take
    # runs as a task of its own and hands a copy it got for a cancelled receive back.
    transport, session = await consuming()
    _, answer = slow_gets(session)
    session.alone.append(message(7, **{"x-jobq-isolate": 1, "x-jobq-attempt": 2}))
    transport._solo.alone.due = True
    receiving = asyncio.ensure_future(transport.receive(10, 0.5))
    await asyncio.sleep(0.01)
    receiving.cancel()
    answer.set()
    with contextlib.suppress(asyncio.CancelledError):
        await receiving
    await asyncio.gather(*transport._tasks)
    (back,) = session.published
    assert back["routing_key"] == "q.alone" and headers(back)["x-jobq-attempt"] == 2
    assert session.completed == [7] and transport._inbox.out == 0  # the original acked, nothing out


async def test_a_spent_copy_taken_for_a_cancelled_receive_goes_back_charged_and_stays_spent(
        ) -> None:
    # Its crash used up its attempts; handed back unrun (a copy, not redelivered, so the crash's
    # mark is gone), it goes back charged: found spent again, by its attempt, never run.
    transport, session = await consuming()
    plain_get = session._get
    asked, answer = slow_gets(session)
    session.alone.append(message(8, redelivered=True, **{"x-jobq-isolate": 1, "x-jobq-attempt": 3}))
    transport._solo.alone.due = True
    receiving = asyncio.ensure_future(transport.receive(10, 0.5))
    await asyncio.wait_for(asked.wait(), 5.0)
    receiving.cancel()
    answer.set()
    with contextlib.suppress(asyncio.CancelledError):
        await receiving
    await asyncio.gather(*transport._tasks)
    (back,) = session.published
    assert back["routing_key"] == "q.alone" and headers(back)["x-jobq-attempt"] == 4

    session.raw = SimpleNamespace(basic_get=plain_get)
    transport._solo.alone.due = True
    (again,) = await transport.receive(10, 0.5)
    assert again.job.id == "job-8" and isinstance(again.fact, Spent)
    assert again.fact.reason == "attempt 4 is over max_attempts 3 (header x-jobq-attempt)"


async def test_the_next_copy_waits_for_the_last_ones_ack_to_go_out() -> None:
    # If the process died after a suspect settled but before its ack went out, the suspect
    # would come back from q.alone and be charged a crash it did not cause.
    transport, session = await consuming()
    session.ack_delay = 0.05
    session.alone += [message(10, **{"x-jobq-isolate": 1}), message(11, **{"x-jobq-isolate": 1})]
    transport._solo.alone.due = True
    (first,) = await transport.receive(10, 0.01)
    await transport.settle(first, Ack())
    acked_before = list(session.completed)
    (second,) = await transport.receive(10, 0.5)
    assert second.job.id == "job-11"
    assert first.handle.tag in session.completed and first.handle.tag not in acked_before


async def test_on_classic_a_first_redelivery_runs_again_marked_and_a_second_goes_alone() -> None:
    # A classic queue that recovered from a crash of its broker marks every message redelivered:
    # the first time, a copy back to the work queue (attempt kept), to run with the others.
    transport, session = await consuming(RabbitConfig(queue_type="classic"))
    await arrive(transport, session,
                 message(1, redelivered=True, **{"x-jobq-attempt": 2}),
                 message(2, **{"x-jobq-suspect": 1}),  # a copy that was not redelivered: runs
                 message(3, redelivered=True, **{"x-jobq-suspect": 1}))  # back again: alone

    copies = {p["properties"].message_id: p for p in session.published}
    first = copies["job-1"]
    assert first["routing_key"] == "q" and headers(first)["x-jobq-suspect"] == 1
    assert headers(first)["x-jobq-attempt"] == 2 and "x-jobq-isolate" not in headers(first)
    second = copies["job-3"]
    assert second["routing_key"] == "q.alone" and headers(second)["x-jobq-isolate"] == 1
    assert "x-jobq-suspect" not in headers(second) and headers(second)["x-jobq-attempt"] == 1
    assert [d.job.id for d in transport._inbox.arrived] == ["job-2"]
    assert sorted(session.completed) == [1, 3]  # the originals of the two copies acked
    (runs,) = await transport.receive(10, 0.01)
    await transport.settle(runs, RetryIn(0, "failed cleanly"))  # it did not crash: the mark goes
    assert "x-jobq-suspect" not in headers(session.published[-1])
