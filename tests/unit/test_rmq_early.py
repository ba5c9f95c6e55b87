"""Messages that arrive before their due time: held, sent on, given back; never run early,
never charged a crash they could not have had."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.unit.test_rmq_crash_copies import consuming, headers, message


def due_in(seconds: float) -> int:
    return round((time.time() + seconds) * 1000)


async def test_a_held_message_is_handed_out_at_its_time_not_before() -> None:
    transport, session = await consuming()
    await transport._on_message(session, message(1, **{"x-jobq-due": due_in(0.3)}))  # type: ignore[arg-type]
    started = time.time()
    assert await transport.receive(10, 0.1) == []  # held, not handed out
    (delivery,) = await transport.receive(10, 1.0)
    assert time.time() - started >= 0.19 and delivery.job.id == "job-1"


async def test_a_pause_gives_back_what_is_held_rather_than_keeping_it() -> None:
    # Before: a held message went into the buffer of a paused consumer at its time and stayed
    # unacked for the whole pause (until the broker's consumer_timeout closed the channel).
    transport, session = await consuming()
    await transport._on_message(session, message(1, **{"x-jobq-due": due_in(0.5)}))  # type: ignore[arg-type]
    transport._state.paused = True
    transport._state.let_go.set()  # what quiesce() does besides cancelling the consumer
    await asyncio.wait_for(asyncio.gather(*transport._tasks), 0.3)
    assert [p["routing_key"] for p in session.published] == ["q"] and session.completed == [1]
    assert not transport._inbox.arrived


async def test_an_early_copy_taken_from_alone_is_not_charged_a_crash() -> None:
    # Before: a redelivered copy not yet due went through the crash path first and was charged
    # an attempt (or buried at its last one), though an early message is never run.
    transport, session = await consuming()
    copy: Any = message(7, redelivered=True, **{"x-jobq-due": due_in(3600), "x-jobq-isolate": 1,
                                              "x-jobq-attempt": 3})
    session.alone.append(copy)
    taken = await transport._solo.take(session, [True])  # type: ignore[arg-type]
    assert taken is None  # nothing to run
    (forwarded,) = session.published
    assert forwarded["routing_key"] == "q.retry.3600"  # sent on through the hops
    assert headers(forwarded)["x-jobq-attempt"] == 3 and "x-jobq-isolate" not in headers(forwarded)
