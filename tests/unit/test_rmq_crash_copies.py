"""Crash redeliveries on RabbitMQ without a broker: the copy decision, and a marked job run alone."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.job import Job
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.crashes import crash_copy


def job(attempt: int, max_attempts: int = 3) -> Job:
    return Job(id="1", queue="q", kind="k", payload={}, attempt=attempt, max_attempts=max_attempts)


def test_an_unmarked_crash_redelivery_is_refunded() -> None:
    assert crash_copy(job(2), isolated=False).attempt == 2
    assert crash_copy(job(3), isolated=False).dead is None  # even on its last attempt


def test_a_marked_one_ran_alone_so_the_crash_counts_until_it_is_dead() -> None:
    assert (crash_copy(job(1), isolated=True).attempt, crash_copy(job(1), isolated=True).dead) == (2, None)
    last = crash_copy(job(3), isolated=True)
    assert last.attempt == 3  # the attempts it had: what the dead letter reports
    assert last.dead is not None and last.dead.startswith(
        "lost mid-job: killed its consumer while running alone on attempt 3 of 3")


class FakeSession:
    """A live session: records publishes, acks, cancels and consumes."""

    alive = True

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.completed: list[int] = []
        self.calls: list[str] = []
        self.consumer_tag: str | None = "ctag-1"
        self.sender = SimpleNamespace(basic_publish=self._publish)
        self.raw = SimpleNamespace(basic_consume=self._consume)
        self.tracker = SimpleNamespace(waiting=False)
        self.holding = False
        self.last_ack = 0.0
        self.wake = asyncio.Event()

    async def _publish(self, body: bytes, **kwargs: Any) -> None:
        self.published.append({"body": body, **kwargs})

    async def _consume(self, queue: str, callback: Any) -> Any:
        self.calls.append("consume")
        return SimpleNamespace(consumer_tag="ctag-2")

    def complete(self, tag: int) -> None:
        self.completed.append(tag)

    async def cancel_consumer(self) -> None:
        self.calls.append("cancel")
        self.consumer_tag = None


def message(tag: int, *, redelivered: bool = False, **headers: Any) -> Any:
    props = Basic.Properties(message_id=f"job-{tag}", message_type="k", headers={
        "x-jobq-attempt": 1, "x-jobq-max-attempts": 3, **headers})
    return SimpleNamespace(body=b"{}", header=SimpleNamespace(properties=props),
                           delivery=SimpleNamespace(delivery_tag=tag, redelivered=redelivered))


async def consuming() -> tuple[RabbitTransport, FakeSession]:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    transport = RabbitTransport(link, RabbitConfig(), queue="q", prefetch=8, max_attempts=3)
    session = FakeSession()
    transport._session = session  # type: ignore[assignment]
    transport._resumed.set()
    return transport, session


async def arrive(transport: RabbitTransport, session: FakeSession, *messages: Any) -> None:
    for m in messages:
        await transport._on_message(session, m)  # type: ignore[arg-type]
    await asyncio.gather(*transport._tasks)


def headers(published: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = published["properties"].headers
    return result


async def test_crash_redeliveries_are_copied_forward_not_run() -> None:
    transport, session = await consuming()
    await arrive(transport, session,
                 message(1, redelivered=True, **{"x-jobq-attempt": 2}),  # classic
                 message(2, **{"x-delivery-count": 1}),  # quorum
                 message(3, redelivered=True, **{"x-jobq-attempt": 2, "x-jobq-isolate": 1}),
                 message(4, redelivered=True, **{"x-jobq-attempt": 3, "x-jobq-isolate": 1}))

    assert await transport.receive(10, 0.01) == []  # none of them runs now
    copies = {p["properties"].message_id: p for p in session.published}
    assert [(copies[f"job-{n}"]["exchange"], copies[f"job-{n}"]["routing_key"]) for n in (1, 2, 3, 4)] == [
        ("", "q"), ("", "q"), ("", "q"), ("q.dlx", "q")]
    assert [headers(copies[f"job-{n}"])["x-jobq-attempt"] for n in (1, 2, 3)] == [2, 1, 3]
    assert all(headers(copies[f"job-{n}"])["x-jobq-isolate"] == 1 for n in (1, 2, 3))
    dead = headers(copies["job-4"])
    assert dead["x-jobq-attempts"] == 3 and "x-jobq-isolate" not in dead
    assert dead["x-jobq-error"].startswith("lost mid-job: killed its consumer while running alone")
    assert sorted(session.completed) == [1, 2, 3, 4]  # each original acked once copied


async def test_a_marked_job_is_handed_out_alone_with_the_consumer_cancelled() -> None:
    transport, session = await consuming()
    await arrive(transport, session, message(1))
    (plain,) = await transport.receive(10, 0.01)
    await arrive(transport, session, message(2, **{"x-jobq-isolate": 1}), message(3),
                 message(4, **{"x-jobq-isolate": 1}))

    assert await transport.receive(10, 0.01) == []  # not while another job is out
    await transport.ack(plain)
    (alone,) = await transport.receive(10, 0.01)

    assert alone.isolate and alone.job.id == "job-2"
    assert session.calls == ["cancel"]
    # The other marked one is handed back (mark and attempt kept): held, it would be charged
    # for this run's crash.
    (back,) = session.published
    assert back["properties"].message_id == "job-4" and headers(back)["x-jobq-isolate"] == 1
    assert await transport.receive(10, 0.01) == []  # nothing else while it runs
    await transport.retry(alone, 0, "failed cleanly")
    await asyncio.gather(*transport._tasks)
    assert session.calls == ["cancel", "consume"]
    assert "x-jobq-isolate" not in headers(session.published[-1])  # a clean failure: unmarked
    (after,) = await transport.receive(10, 0.01)
    assert after.job.id == "job-3" and not after.isolate
