"""Bad input, one case each: the reason the Postgres decoder gives, the error enqueue raises."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from jobq.config import LimitsConfig
from jobq.core.errors import JobTooLarge, MalformedJob
from jobq.core.limits import encode_new_job
from jobq.core.port import NewJob
from jobq.transports.postgres.decode import row_to_delivery
from jobq.transports.postgres.publisher import encode

SMALL = LimitsConfig(max_payload=100, max_headers=50)
OK = (1, "k", "{}", "{}", 1, 5, None)


def reason(**fields: object) -> str | None:
    row = list(OK)
    names = ["id", "kind", "payload", "headers", "attempts", "max_attempts", "created_at"]
    for name, value in fields.items():
        row[names.index(name)] = value
    return row_to_delivery(row, "q", SMALL).malformed


@pytest.mark.parametrize(("fields", "expected"), [
    ({"payload": b"\xff\xfe{}"}, "payload is not UTF-8 (invalid start byte at byte 0)"),
    ({"payload": "{not json"}, "payload is not JSON (Expecting property name enclosed in double "
                               "quotes: line 1 column 2 (char 1))"),
    ({"payload": "[1, 2]"}, "payload is not a JSON object (got list)"),
    ({"payload": '"text"'}, "payload is not a JSON object (got str)"),
    ({"payload": "[" * 100_000 + "]" * 100_000}, "payload is 200,000 bytes as JSON, over the limit of "
                                                 "100 (limits.max_payload)"),
    ({"payload": json.dumps({"pad": "x" * 200})}, "payload is 211 bytes as JSON, over the limit of 100 "
                                                  "(limits.max_payload)"),
    ({"headers": json.dumps({"h": "x" * 60})}, "headers are 69 bytes as JSON, over the limit of 50 "
                                               "(limits.max_headers)"),
    ({"headers": "[]"}, "headers are not a JSON object (got list)"),
    ({"kind": ""}, "kind is empty"),
    ({"kind": None}, "kind is not a string (got NoneType)"),
    ({"kind": 42}, "kind is not a string (got int)"),
    ({"kind": "k" * 201}, "kind is longer than 200 characters"),
    ({"attempts": "1"}, "attempts is not an integer >= 0 (got '1')"),
    ({"max_attempts": 0}, "max_attempts is not an integer >= 1 (got 0)"),
])
def test_each_bad_field_gets_a_reason_naming_it(fields: dict[str, object], expected: str) -> None:
    assert reason(**fields) == expected


def test_nested_too_deeply_for_python_is_a_reason_not_an_exception() -> None:
    deep = "[" * 5000 + "]" * 5000  # PostgreSQL stores this; Python's json gives up at ~1000
    delivery = row_to_delivery((1, "k", '{"a": ' + deep + "}", "{}", 1, 5, None), "q")
    assert delivery.malformed == "payload is nested too deeply to decode"


def test_missing_fields_are_named() -> None:
    delivery = row_to_delivery((9, "k", "{}"), "q")
    assert delivery.malformed == "missing fields: headers, attempts, max_attempts, created_at"
    assert delivery.job.id == "9"


def test_a_good_row_is_not_malformed_and_keeps_its_values() -> None:
    delivery = row_to_delivery((3, "email", '{"to": "a@b"}', '{"trace": "t1"}', 2, 5, None), "q", SMALL)
    assert delivery.malformed is None
    assert (delivery.job.kind, delivery.job.payload, delivery.job.headers) == (
        "email", {"to": "a@b"}, {"trace": "t1"})


@pytest.mark.parametrize(("job", "error", "words"), [
    (NewJob(kind="k", payload={"pad": "x" * 200}), JobTooLarge,
     "payload is 211 bytes as JSON, over the limit of 100 (limits.max_payload)"),
    (NewJob(kind="k", headers={"h": "x" * 60}), JobTooLarge,
     "headers are 69 bytes as JSON, over the limit of 50 (limits.max_headers)"),
    (NewJob(kind="", payload={}), MalformedJob, "kind is empty"),
    (NewJob(kind="k", payload=[1, 2]), MalformedJob,  # type: ignore[arg-type]
     "payload must be a JSON object, got list"),
    (NewJob(kind="k", payload={"x": float("nan")}), MalformedJob, "payload is not JSON-serialisable"),
    (NewJob(kind="k", payload={"x": object()}), MalformedJob, "payload is not JSON-serialisable"),
    (NewJob(kind="k", headers={"h": {"a": 1}}), MalformedJob,  # type: ignore[dict-item]
     "header 'h' is not a string (got dict)"),
])
def test_enqueue_refuses_bad_jobs_with_a_clear_error(job: NewJob, error: type[Exception], words: str) -> None:
    with pytest.raises(error) as info:
        encode_new_job(job, SMALL)
    assert words in str(info.value)


def test_the_default_payload_limit_is_one_mebibyte() -> None:
    assert LimitsConfig().max_payload == 1_048_576
    encode_new_job(NewJob(kind="k", payload={"pad": "x" * (1_048_576 - 11)}), LimitsConfig())
    with pytest.raises(JobTooLarge, match="1,048,577 bytes"):
        encode_new_job(NewJob(kind="k", payload={"pad": "x" * (1_048_576 - 10)}), LimitsConfig())


def test_postgres_refuses_a_nul_character_it_could_not_store() -> None:
    with pytest.raises(MalformedJob, match="NUL"):
        encode(NewJob(kind="k", payload={"s": "a\x00b"}))
    encode(NewJob(kind="k", payload={"s": "a\\u0000b"}))  # a backslash and "u0000": fine


def test_a_header_value_means_the_same_text_on_both_backends() -> None:
    """Issue 37: a nested header value was dead-lettered on PostgreSQL and run as a Python repr
    on RabbitMQ, and a null was "" on one and "None" on the other. Both now give the one
    meaning of docs/wire-format.md (core/limits.header_text)."""
    from pamqp.commands import Basic

    from jobq.transports.rabbitmq.codec import decode

    values = {"s": "text", "n": 3, "f": 1.5, "b": True, "z": None, "o": {"a": [1, "x"]}, "l": [1]}
    expected = {"s": "text", "n": "3", "f": "1.5", "b": "True", "z": "", "o": '{"a": [1, "x"]}',
                "l": "[1]"}
    row = row_to_delivery([1, "k", "{}", json.dumps(values), 0, 3, datetime.now(UTC)], "q")
    assert row.malformed is None
    assert dict(row.job.headers) == expected
    job, problem = decode(b"{}", Basic.Properties(message_id="1", message_type="k", headers=values),
                          queue="q", max_attempts=3)
    assert problem is None
    assert dict(job.headers) == expected
