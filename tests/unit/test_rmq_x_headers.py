"""x- headers count toward limits.max_headers, at enqueue and on receipt; jobq's own x-jobq-*
headers have a small budget of their own, and no copy carries what would break frame_max."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp.commands import Basic

from jobq.config import LimitsConfig
from jobq.core.errors import JobTooLarge
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.codec import FORWARD_HEADERS, OWN_HEADERS, decode, encode_job, republish


def props(**headers: Any) -> Basic.Properties:
    return Basic.Properties(message_id="7", message_type="email",
                            headers={"x-jobq-attempt": 1, "x-jobq-max-attempts": 4,
                                     "x-jobq-enqueued-at": 1.5, **headers})


def problem(p: Basic.Properties, limits: LimitsConfig | None = None) -> str | None:
    return decode(b"{}", p, queue="q", max_attempts=9, fallback_id="amqp-1", limits=limits)[1]


def test_an_x_header_from_another_producer_counts_toward_the_limit_on_receipt() -> None:
    # Before: left out, so a 130 kB x- header ran, and its retry copy broke frame_max.
    assert problem(props(**{"x-big": "y" * 70_000})) == (
        "headers are 70,013 bytes as JSON, over the limit of 65,536 (limits.max_headers)")
    assert problem(props(**{"x-a": "y" * 40_000, "b": "z" * 40_000})) == (
        "headers are 80,020 bytes as JSON, over the limit of 65,536 (limits.max_headers)")
    assert problem(props(**{"x-small": "y" * 100})) is None
    job, _ = decode(b"{}", props(**{"x-small": "s", "h": "v"}), queue="q", max_attempts=9,
                    fallback_id="amqp-1")
    assert job.headers == {"h": "v"}  # the handler still sees the job's own headers only


def test_jobq_and_broker_headers_are_not_the_users_budget() -> None:
    limits = LimitsConfig(max_headers=100)
    reason = "E: " + "r" * 4_000
    assert problem(props(**{"x-jobq-last-error": reason, "x-delivery-count": 3,
                            "x-death": [{"queue": "q.retry.1", "count": 2}]}), limits) is None
    assert problem(props(**{"x-jobq-last-error": "r" * (OWN_HEADERS + 1)})) == (
        f"jobq's own headers (x-jobq-*) are about {OWN_HEADERS + 1:,} characters, more than "
        f"jobq writes ({OWN_HEADERS:,})")


def test_enqueue_counts_x_headers_too() -> None:
    with pytest.raises(JobTooLarge, match="headers are 70,013 bytes"):
        encode_job(NewJob(kind="k", payload={}, headers={"x-big": "y" * 70_000}), job_id="1",
                   max_attempts=3)


def test_a_copy_drops_foreign_x_headers_too_large_to_forward() -> None:
    # Before: only headers not starting with x- were counted, so this copy went out with 130 kB
    # of headers plus the retry reason, over the broker's frame_max: the connection closed.
    _, copy = republish(b"{}", props(**{"x-big": "y" * 130_000, "h": "v"}),
                        {"x-jobq-last-error": "ValueError: no"})
    assert copy.headers is not None
    assert "x-big" not in copy.headers and "h" not in copy.headers
    assert copy.headers["x-jobq-headers-dropped"] == (
        "2 headers, about 130,007 bytes: too large to forward")
    assert copy.headers["x-jobq-attempt"] == 1 and copy.headers["x-jobq-enqueued-at"] == 1.5
    _, kept = republish(b"{}", props(**{"x-big": "y" * (FORWARD_HEADERS - 10)}), {})
    assert kept.headers is not None and "x-big" in kept.headers


def test_a_copy_drops_jobq_headers_someone_else_made_large() -> None:
    _, copy = republish(b"{}", props(**{"x-jobq-last-error": "e" * 130_000}),
                        {"x-jobq-error": "MalformedJob: ..."})
    assert copy.headers is not None and "x-jobq-last-error" not in copy.headers
    assert copy.headers["x-jobq-error"] == "MalformedJob: ..."
