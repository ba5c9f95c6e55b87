"""What a message that arrived is (inbound.classify), decided from the bytes of its frames: no
broker, no session, no clock but the time passed in."""

from __future__ import annotations

from typing import Any

from pamqp import frame, header
from pamqp.commands import Basic

from jobq.config import LimitsConfig
from jobq.core.job import CancelRequested, Spent
from jobq.core.port import NewJob
from jobq.transports.rabbitmq import reading
from jobq.transports.rabbitmq.codec import encode_job
from jobq.transports.rabbitmq.inbound import Arrival, Rules, classify

NOW = 1_800_000_000.0  # epoch seconds: the time every classification here is made at
RULES = Rules("q", 3, LimitsConfig())
CLASSIC = Rules("q", 3, LimitsConfig(), strikes=True)
HANDLE = object()  # the consumer's handle: carried into the delivery untouched


def received(body: bytes, props: Basic.Properties, *, redelivered: bool = False,
             rules: Rules = RULES, cancelled: frozenset[str] = frozenset(),
             alone: bool = False, now: float = NOW) -> Arrival:
    """``classify`` of the message as it comes off the wire: its Basic.Deliver and content header
    marshalled to frame bytes and decoded by the consumer's own decoders (reading.py)."""
    deliver = reading.method_frame(frame.marshal(
        Basic.Deliver("ctag", 7, redelivered, "", "q"), 1)[7:-1])
    content = reading.header_frame(frame.marshal(
        header.ContentHeader(0, len(body), props), 1)[7:-1])
    return classify(body, content.properties, redelivered=deliver.redelivered, handle=HANDLE,
                    rules=rules, cancelled=cancelled, clock=lambda: now, alone=alone)


def jobq_message(**headers: Any) -> tuple[bytes, Basic.Properties]:
    """What jobq's producer sends for a job, its headers then set or replaced by ``headers``."""
    body, props = encode_job(NewJob(kind="k", payload={"a": 1}), job_id="42", max_attempts=3)
    assert props.headers is not None
    props.headers = {**props.headers, **headers}
    return body, props


def test_a_job_as_the_producer_sends_it_is_for_the_pool() -> None:
    arrival = received(*jobq_message())
    delivery = arrival.delivery
    assert (arrival.due, arrival.copy) == (None, None)
    assert delivery.malformed is None and delivery.fact is None and not delivery.isolate
    assert (delivery.job.id, delivery.job.kind, delivery.job.payload) == ("42", "k", {"a": 1})
    assert (delivery.job.attempt, delivery.job.max_attempts, delivery.job.queue) == (1, 3, "q")
    assert delivery.handle is HANDLE


def test_a_body_that_is_no_job_is_malformed_whatever_else_it_says() -> None:
    _, props = jobq_message(**{"x-jobq-due": round((NOW + 60) * 1000)})
    arrival = received(b"not json", props, redelivered=True, cancelled=frozenset({"42"}))
    assert arrival.delivery.malformed is not None and "body" in arrival.delivery.malformed
    assert (arrival.due, arrival.copy, arrival.delivery.fact) == (None, None, None)
    assert arrival.delivery.job.id == "42"  # what could be recovered
    taken = received(b"not json", props, alone=True)
    assert taken.delivery.malformed is not None and not taken.delivery.isolate


def test_a_message_without_id_or_kind_is_malformed_unless_plain_ones_are_opted_in() -> None:
    props = Basic.Properties(content_type="application/json")
    assert "message_id" in (received(b"{}", props).delivery.malformed or "")
    plain = received(b"{}", props, rules=Rules("q", 3, LimitsConfig(), default_kind="plain"))
    assert plain.delivery.malformed is None and plain.delivery.job.kind == "plain"


def test_a_tombstone_makes_it_a_cancel_request_before_anything_else() -> None:
    body, props = jobq_message(**{"x-jobq-due": round((NOW + 60) * 1000)})
    arrival = received(body, props, redelivered=True, cancelled=frozenset({"42"}))
    assert isinstance(arrival.delivery.fact, CancelRequested)
    assert (arrival.due, arrival.copy) == (None, None)  # not held, not copied: settled unrun
    assert received(body, props, cancelled=frozenset({"41"})).delivery.fact is None
    from_alone = received(body, props, cancelled=frozenset({"42"}), alone=True)
    assert isinstance(from_alone.delivery.fact, CancelRequested) and from_alone.delivery.isolate


def test_a_message_not_yet_due_says_when_it_is_and_one_due_is_for_the_pool() -> None:
    due = round((NOW + 2.5) * 1000)
    early = received(*jobq_message(**{"x-jobq-due": due}))
    assert early.due == due / 1000 and early.copy is None
    # Not yet due from <q>.alone too, crash or not: it never ran, so no crash was its own.
    copy = received(*jobq_message(**{"x-jobq-due": due, "x-jobq-isolate": 1}), redelivered=True,
                    alone=True)
    assert copy.due == due / 1000 and copy.copy is None
    late = received(*jobq_message(**{"x-jobq-due": round((NOW - 1) * 1000)}))
    assert late.due is None and late.delivery.fact is None
    assert received(*jobq_message(**{"x-jobq-due": "soon"})).due is None  # not a time: not held


def test_a_crash_redelivery_is_copied_forward_uncharged() -> None:
    classic = received(*jobq_message(**{"x-jobq-attempt": 2}), redelivered=True)
    quorum = received(*jobq_message(**{"x-delivery-count": 1}))
    older = received(*jobq_message(**{"x-jobq-isolate": 1, "x-jobq-attempt": 3}))
    for arrival, attempt in ((classic, 2), (quorum, 1), (older, 3)):
        assert arrival.copy is not None and arrival.due is None
        assert (arrival.copy.attempt, arrival.copy.suspect, arrival.copy.dead) == (attempt, False,
                                                                                   None)


def test_on_a_classic_queue_a_first_redelivery_is_a_suspect_and_a_second_goes_alone() -> None:
    first = received(*jobq_message(), redelivered=True, rules=CLASSIC)
    assert first.copy is not None and first.copy.suspect
    suspect = received(*jobq_message(**{"x-jobq-suspect": 1}), rules=CLASSIC)
    assert suspect.copy is None and suspect.delivery.fact is None  # not redelivered: it runs
    second = received(*jobq_message(**{"x-jobq-suspect": 1}), redelivered=True, rules=CLASSIC)
    assert second.copy is not None and not second.copy.suspect


def test_an_attempt_header_over_max_attempts_is_spent() -> None:
    arrival = received(*jobq_message(**{"x-jobq-attempt": 4}))
    assert isinstance(arrival.delivery.fact, Spent)
    assert arrival.delivery.fact.reason == "attempt 4 is over max_attempts 3 (header x-jobq-attempt)"
    assert received(*jobq_message(**{"x-jobq-attempt": 3})).delivery.fact is None


def test_from_alone_a_crash_is_charged_until_the_attempts_are_spent() -> None:
    charged = received(*jobq_message(**{"x-jobq-isolate": 1}), redelivered=True, alone=True)
    assert charged.copy is not None and charged.copy.attempt == 2
    last = received(*jobq_message(**{"x-jobq-isolate": 1, "x-jobq-attempt": 3}),
                    redelivered=True, alone=True)
    assert last.copy is None and last.delivery.isolate
    assert isinstance(last.delivery.fact, Spent)
    assert last.delivery.fact.reason.startswith(
        "lost mid-job: killed or stalled its consumer while running alone on attempt 3 of 3")
    clean = received(*jobq_message(**{"x-jobq-isolate": 1}), alone=True)
    assert clean.copy is None and clean.delivery.isolate and clean.delivery.fact is None


def test_the_time_is_the_callers() -> None:
    # Pure: the same bytes at another time, another answer; the wall clock plays no part.
    message = jobq_message(**{"x-jobq-due": round((NOW + 5) * 1000)})
    assert received(*message).due == NOW + 5
    assert received(*message, now=NOW + 5).due is None  # due now: for the pool
