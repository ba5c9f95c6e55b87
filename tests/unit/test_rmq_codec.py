"""Jobs as AMQP messages and back, malformed messages included."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from jobq.config import LimitsConfig
from jobq.core.errors import JobTooLarge, MalformedJob
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.codec import crashed, decode, due_at, encode_job, isolated, republish


def props(message_id: str | None = "7", kind: str | None = "email", **headers: Any
          ) -> Basic.Properties:
    return Basic.Properties(message_id=message_id, message_type=kind,
                            headers={"x-jobq-attempt": 1, "x-jobq-max-attempts": 4, **headers})


def read(body: bytes, p: Basic.Properties) -> tuple[Any, str | None]:
    return decode(body, p, queue="q", max_attempts=9, fallback_id="amqp-1")


def test_round_trip() -> None:
    body, message = encode_job(NewJob(kind="email", payload={"to": "a@b"}, headers={"trace": "t1"}),
                               job_id="42", max_attempts=3)
    assert message.message_id == "42" and message.message_type == "email"
    assert message.delivery_mode == 2 and message.content_type == "application/json"
    assert message.timestamp is not None
    job, problem = read(body, message)
    assert problem is None
    assert (job.id, job.kind, job.payload, job.attempt, job.max_attempts) == (
        "42", "email", {"to": "a@b"}, 1, 3)
    assert job.headers == {"trace": "t1"}  # jobq's and the broker's x- headers are not the job's
    assert job.enqueued_at is not None
    assert job.enqueued_at.timestamp() * 1000 == pytest.approx(message.headers["x-jobq-enqueued-at"])


def on_the_wire(props: Basic.Properties) -> Basic.Properties:
    """``props`` as a consumer reads them: marshalled and parsed by pamqp, as aiormq does."""
    raw = ContentHeader(0, 2, props).marshal()
    back = ContentHeader()
    back.unmarshal(raw)
    return back.properties


def test_times_survive_the_wire_to_the_millisecond() -> None:
    # Before: float epoch seconds, which pamqp writes as a 32-bit float: 128 s steps at today's
    # epoch, so job.enqueued_at (and jobq_job_latency) was up to a minute off on RabbitMQ.
    before = time.time()
    body, props = encode_job(NewJob(kind="k", delay=0.3), job_id="1", max_attempts=3)
    wired = on_the_wire(props)
    job, _ = read(body, wired)
    assert job.enqueued_at is not None
    assert before - 0.002 <= job.enqueued_at.timestamp() <= time.time() + 0.002
    due = due_at(wired)
    assert due is not None and before + 0.3 <= due <= time.time() + 0.302


def test_a_job_due_now_or_in_the_past_carries_no_due_time() -> None:
    for job in (NewJob(kind="k"), NewJob(kind="k", run_at=datetime(2020, 1, 1, tzinfo=UTC))):
        _, props = encode_job(job, job_id="1", max_attempts=3)
        assert due_at(props) is None


def test_run_at_sets_the_due_time() -> None:
    at = datetime.now(UTC) + timedelta(hours=2)
    _, props = encode_job(NewJob(kind="k", run_at=at), job_id="1", max_attempts=3)
    due = due_at(on_the_wire(props))
    assert due is not None and abs(due - at.timestamp()) < 0.002


def test_an_older_jobqs_float_enqueue_time_is_still_read_as_seconds() -> None:
    job, _ = read(b"{}", Basic.Properties(message_id="1", message_type="k",
                                          headers={"x-jobq-enqueued-at": 1_700_000_000.5}))
    assert job.enqueued_at is not None and job.enqueued_at.timestamp() == 1_700_000_000.5


def test_enqueue_time_falls_back_to_the_whole_second_timestamp() -> None:
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    job, _ = read(b"{}", Basic.Properties(message_id="1", message_type="k", timestamp=stamp))
    assert job.enqueued_at == stamp


def test_the_attempt_is_the_header_alone_and_crash_redeliveries_are_told_apart() -> None:
    # Crash redeliveries no longer add to the attempt: they are copied forward (rmq crashes),
    # and the copy's header carries the count.
    quorum_props = props(**{"x-jobq-attempt": 2, "x-delivery-count": 3})
    quorum, _ = read(b"{}", quorum_props)
    assert quorum.attempt == 2 and crashed(quorum_props, redelivered=False)
    classic_props = props(**{"x-jobq-attempt": 2})
    classic, _ = read(b"{}", classic_props)
    assert classic.attempt == 2 and crashed(classic_props, redelivered=True)
    fresh_props = props(**{"x-delivery-count": 0})
    fresh, _ = read(b"{}", fresh_props)
    assert fresh.attempt == 1
    assert not crashed(fresh_props, redelivered=False) and not crashed(props(), redelivered=False)
    assert not crashed(Basic.Properties(headers={"x-delivery-count": "3"}), redelivered=False)


def test_only_an_integer_1_marks_a_message_to_run_alone() -> None:
    assert isolated(props(**{"x-jobq-isolate": 1}))
    assert not isolated(props()) and not isolated(props(**{"x-jobq-isolate": "1"}))
    assert not isolated(Basic.Properties(headers=None))


def test_a_released_copy_keeps_the_isolate_mark_and_a_dropped_one_loses_it() -> None:
    original = props(**{"x-jobq-isolate": 1, "x-delivery-count": 1})
    _, kept = republish(b"{}", original, {"x-jobq-attempt": 1})
    _, dropped = republish(b"{}", original, {"x-jobq-attempt": 2}, drop=("x-jobq-isolate",))
    assert kept.headers["x-jobq-isolate"] == 1 and "x-delivery-count" not in kept.headers
    assert "x-jobq-isolate" not in dropped.headers


@pytest.mark.parametrize(("body", "p", "reason"), [
    (b"{nope", props(), "body is not JSON"),
    (b"\xff\xfe", props(), "body is not UTF-8"),
    (b"[1, 2]", props(), "body is not a JSON object (got list)"),
])
def test_malformed_messages_say_why(body: bytes, p: Basic.Properties, reason: str) -> None:
    job, problem = read(body, p)
    assert problem is not None and problem.startswith(reason)
    assert job.id in ("7", "amqp-1") and job.payload == {}


def test_a_plain_message_is_a_job_once_plain_messages_are_opted_in() -> None:
    # Before: always dead-lettered as "message has no message_id" / "message has no type".
    plain = Basic.Properties(content_type="application/json")
    job, problem = decode(b'{"to": "a@b"}', plain, queue="emails", max_attempts=3,
                          default_kind="send")
    assert problem is None and job.kind == "send" and job.payload == {"to": "a@b"}
    assert job.id.isdigit() and job.attempt == 1
    other, _ = decode(b"{}", plain, queue="emails", max_attempts=3, default_kind="send")
    assert other.id != job.id
    # Its copies (retry, dead letter, crash copy) carry the id and kind it was given.
    _, copy = republish(b"{}", plain, {"x-jobq-attempt": 2}, identity=(job.id, job.kind))
    assert (copy.message_id, copy.message_type) == (job.id, "send")
    again, _ = decode(b"{}", copy, queue="emails", max_attempts=3)
    assert (again.id, again.kind, again.attempt) == (job.id, "send", 2)


@pytest.mark.parametrize(("p", "reason"), [
    (props(message_id=None), "message has no message_id (the job id)"),
    (props(kind=None), "message has no type (the job kind)"),
])
def test_without_the_opt_in_a_plain_message_is_malformed_saying_how_to_opt_in(
        p: Basic.Properties, reason: str) -> None:
    _, problem = read(b"{}", p)
    assert problem is not None and problem.startswith(reason)
    assert "set rabbitmq.default_kind" in problem


def test_a_message_from_elsewhere_without_jobq_headers_is_a_first_attempt() -> None:
    job, problem = read(b'{"a": 1}', Basic.Properties(message_id="x", message_type="k"))
    assert problem is None and job.attempt == 1 and job.max_attempts == 9


def test_encode_refuses_what_cannot_be_a_message() -> None:
    with pytest.raises(MalformedJob):
        encode_job(NewJob(kind="", payload={}), job_id="1", max_attempts=1)
    with pytest.raises(MalformedJob):
        encode_job(NewJob(kind="k", payload={"x": object()}), job_id="1", max_attempts=1)


def test_republish_drops_the_broker_headers_and_sets_jobq_ones() -> None:
    original = props(**{"x-delivery-count": 2, "x-death": [{"count": 1}], "trace": "t"})
    body, copy = republish(b"{}", original, {"x-jobq-attempt": 4})
    assert copy.headers == {"x-jobq-attempt": 4, "x-jobq-max-attempts": 4, "trace": "t"}
    assert copy.message_id == "7" and copy.message_type == "email" and copy.delivery_mode == 2
    assert body == b"{}"


def test_the_body_is_compact_and_the_payload_limit_is_the_one_postgres_applies() -> None:
    limits = LimitsConfig(max_payload=113)  # {"pad": "<89 x>", "n": [1, 2]} as spaced JSON
    fits = NewJob(kind="k", payload={"pad": "x" * 89, "n": [1, 2]})
    body, _ = encode_job(fits, job_id="1", max_attempts=1, limits=limits)
    assert body == json.dumps(fits.payload, separators=(",", ":")).encode()
    # 110 bytes compact, but 114 as the text Postgres stores: refused on both backends alike.
    with pytest.raises(JobTooLarge, match="payload is 114 bytes as JSON, over the limit of 113"):
        encode_job(NewJob(kind="k", payload={"pad": "x" * 90, "n": [1, 2]}), job_id="1",
                   max_attempts=1, limits=limits)


def test_a_copy_carries_the_properties_a_new_job_has() -> None:
    _, new = encode_job(NewJob(kind="email", payload={}), job_id="9", max_attempts=3)
    _, copy = republish(b"{}", new, {"x-jobq-attempt": 2})
    for name in ("content_type", "delivery_mode", "message_id", "message_type", "timestamp",
                 "priority", "expiration"):
        assert getattr(copy, name) == getattr(new, name), name
