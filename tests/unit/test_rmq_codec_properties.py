"""Property tests (hypothesis) for the RabbitMQ message codec: decode is total, encode round-trips.

Why hypothesis: a consumer must survive whatever another client publishes, so decode has to
turn every body and every property table into a job or a reason, never an exception.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from pamqp.commands import Basic

from jobq.config import LimitsConfig
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.codec import (
    ATTEMPT,
    DELIVERY_COUNT,
    MAX_ATTEMPTS,
    crashed,
    decode,
    encode_job,
    isolated,
)
from tests.unit.test_pg_decode_properties import headers as text_headers
from tests.unit.test_pg_decode_properties import json_objects, kinds

SMALL = LimitsConfig(max_payload=300, max_headers=200)
header_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=30)
    | st.binary(max_size=30) | st.datetimes() | st.decimals(allow_nan=False, places=2),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
jobq_headers = st.fixed_dictionaries({}, optional={
    ATTEMPT: st.integers(-3, 10) | header_values, MAX_ATTEMPTS: st.integers(-3, 10) | header_values,
    DELIVERY_COUNT: st.integers(0, 5) | header_values})
any_headers = (st.none() | st.builds(lambda a, b: {**a, **b}, jobq_headers,
                                     st.dictionaries(st.text(max_size=12), header_values, max_size=4)))
bodies = st.binary(max_size=400) | json_objects.map(lambda o: json.dumps(o).encode())
properties = st.builds(
    Basic.Properties,
    message_id=st.none() | st.text(max_size=20), message_type=st.none() | st.text(max_size=30),
    headers=any_headers, timestamp=st.none() | st.datetimes(timezones=st.just(UTC)))


@given(body=bodies, props=properties, redelivered=st.booleans())
def test_any_message_decodes_to_a_job_or_a_reason_without_raising(
        body: bytes, props: Basic.Properties, redelivered: bool) -> None:
    job, problem = decode(body, props, queue="q", max_attempts=5, fallback_id="amqp-1",
                          limits=SMALL)
    assert isinstance(crashed(props, redelivered), bool) and isinstance(isolated(props), bool)
    event("valid" if problem is None else "malformed")
    assert job.id and isinstance(job.kind, str) and isinstance(job.payload, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in job.headers.items())
    if problem is None:
        assert job.kind and len(body) <= SMALL.max_payload
        assert job.id == (props.message_id or "amqp-1")  # no message_id: the one given it
    else:
        assert isinstance(problem, str) and problem.strip()


@given(kind=kinds.filter(lambda k: len(k.encode()) <= 255), payload=json_objects, head=text_headers,
       max_attempts=st.integers(1, 10))
def test_what_encode_accepts_decodes_back_to_the_same_job(
        kind: str, payload: dict[str, Any], head: dict[str, str], max_attempts: int) -> None:
    head = {k: v for k, v in head.items() if not k.startswith("x-")}  # x- names are jobq's and the broker's
    body, props = encode_job(NewJob(kind=kind, payload=payload, headers=head,
                                    max_attempts=max_attempts), job_id="42", max_attempts=3)
    job, problem = decode(body, props, queue="q", max_attempts=3,
                          fallback_id="amqp-1")
    assert problem is None
    assert (job.id, job.kind, dict(job.payload), dict(job.headers)) == ("42", kind, payload, head)
    assert (job.attempt, job.max_attempts) == (1, max_attempts)
    assert job.enqueued_at is not None and job.enqueued_at <= datetime.now(UTC)


def test_decimal_and_nested_header_values_become_text() -> None:
    props = Basic.Properties(message_id="1", message_type="k",
                             headers={"price": Decimal("1.50"), "tags": ["a", b"b"], "n": 3})
    job, problem = decode(b"{}", props, queue="q", max_attempts=5, fallback_id="x")
    assert problem is None
    assert job.headers == {"price": "1.50", "tags": '["a", "b"]', "n": "3"}
