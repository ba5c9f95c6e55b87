"""Property tests (hypothesis) for the message checks and the Postgres row decoder.

Why hypothesis: the decoder must be total (whatever a row holds, it returns a Delivery and never
raises, or one bad row would stop a claim), and encode/decode must agree on every JSON value,
not only the few a hand-written example thinks of.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from jobq.config import LimitsConfig
from jobq.core.errors import JobTooLarge, MalformedJob
from jobq.core.limits import decode_object, encode_new_job
from jobq.core.port import NewJob
from jobq.transports.postgres.decode import _checked, _well_formed, row_to_delivery

scalars = (st.none() | st.booleans() | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                          max_size=4),
    max_leaves=20)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
kinds = st.text(min_size=1, max_size=40).filter(lambda k: "\x00" not in k)
headers = st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=4)
anything = st.recursive(
    scalars | st.binary(max_size=40) | st.datetimes(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


# Each field either plausible or anything at all; plus rows of the wrong length.
rows = st.tuples(
    st.integers(1, 10**9) | anything, kinds | anything,
    json_objects.map(json.dumps) | st.binary(max_size=40) | st.text(max_size=40) | anything,
    headers.map(json.dumps) | anything, st.integers(0, 10) | anything, st.integers(1, 10) | anything,
    st.datetimes() | anything,
).map(list) | st.lists(anything, max_size=9)


@given(row=rows)
def test_any_row_decodes_to_a_delivery_without_raising(row: list[Any]) -> None:
    delivery = row_to_delivery(row, "q")
    job = delivery.job
    event("valid" if delivery.malformed is None else "malformed")
    assert job.id == str(row[0] if row else None)
    if delivery.malformed is None:
        assert isinstance(job.kind, str) and job.kind
        assert isinstance(job.payload, dict)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in job.headers.items())
        assert job.attempt >= 0 and job.max_attempts >= 1
    else:
        assert delivery.malformed.strip()


@given(raw=st.binary(max_size=200) | st.text(max_size=200))
def test_decode_object_of_any_bytes_or_text_is_an_object_or_a_reason(raw: bytes | str) -> None:
    value, reason = decode_object(raw, "payload", 100, "limits.max_payload")
    if reason is None:
        assert isinstance(value, dict)
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        assert json.loads(text) == value and len(text.encode("utf-8", "surrogatepass")) <= 100
    else:
        assert value == {}


@given(kind=kinds, payload=json_objects, head=headers, attempts=st.integers(1, 10))
def test_what_encode_accepts_decodes_back_to_the_same_job(
        kind: str, payload: dict[str, Any], head: dict[str, str], attempts: int) -> None:
    text, head_text = encode_new_job(NewJob(kind=kind, payload=payload, headers=head), LimitsConfig())
    created = datetime(2024, 1, 1, tzinfo=UTC)
    delivery = row_to_delivery((7, kind, text, head_text, attempts, 10, created), "q")
    assert delivery.malformed is None
    job = delivery.job
    assert (job.kind, dict(job.payload), dict(job.headers)) == (kind, payload, head)
    assert (job.attempt, job.max_attempts, job.enqueued_at) == (attempts, 10, created)


@settings(max_examples=50)
@given(payload=json_objects, limit=st.integers(2, 300))
def test_the_size_limit_is_the_same_at_enqueue_and_on_receipt(payload: dict[str, Any], limit: int) -> None:
    limits = LimitsConfig(max_payload=limit)
    size = len(json.dumps(payload))
    if size > limit:
        with pytest.raises(JobTooLarge, match=r"limits\.max_payload"):
            encode_new_job(NewJob(kind="k", payload=payload), limits)
    else:
        encode_new_job(NewJob(kind="k", payload=payload), limits)
    delivery = row_to_delivery((1, "k", json.dumps(payload), "{}", 1, 5, None), "q", limits)
    assert (delivery.malformed is not None) == (size > limit)


@given(payload=st.one_of(st.lists(scalars), scalars))
def test_encode_refuses_a_payload_that_is_not_an_object(payload: Any) -> None:
    with pytest.raises(MalformedJob, match="payload must be a JSON object"):
        encode_new_job(NewJob(kind="k", payload=payload), LimitsConfig())


# Rows the short path may take: no headers; the payload, counts and kind plausible or not.
plain_rows = st.tuples(
    st.integers(1, 10**9), kinds | st.just("") | anything,
    json_objects.map(json.dumps) | st.text(max_size=40) | anything, st.just("{}"),
    st.integers(-1, 10) | st.booleans() | anything, st.integers(0, 10) | anything,
    st.datetimes() | anything, st.booleans() | st.none(),
).map(list)


# ... and rows that are one field away from it (a count out of range, a payload near the limit).
near_rows = st.tuples(
    st.integers(1, 10**9), kinds, json_objects.map(json.dumps), st.just("{}"), st.integers(-2, 3),
    st.integers(-1, 3), st.datetimes(), st.booleans(),
).map(list)


def agree(row: list[Any], limits: LimitsConfig) -> None:
    fast, full = row_to_delivery(row, "q", limits), _checked(row, "q", limits)
    event("short path" if _well_formed(row, "q", limits) is not None else "full checks")
    assert (fast.job, fast.malformed, fast.isolate, fast.handle) == (
        full.job, full.malformed, full.isolate, full.handle)


@settings(max_examples=300)
@given(row=near_rows, limit=st.sampled_from([16, 24, 40, 1 << 20]))
def test_the_short_path_decodes_a_row_near_validity_as_the_full_checks_do(
        row: list[Any], limit: int) -> None:
    agree(row, LimitsConfig(max_payload=limit))


@given(row=plain_rows | rows)
def test_the_short_path_decodes_any_row_as_the_full_checks_do(row: list[Any]) -> None:
    agree(row, LimitsConfig())
