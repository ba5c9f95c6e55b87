"""Jobs as AMQP messages and back; a message that is not a valid job becomes a malformed Delivery.

A message: JSON object body (the payload), ``message_id`` = job id, ``type`` = kind,
``timestamp`` = enqueue time, persistent; headers ``x-jobq-attempt`` (the attempt number its
next delivery is, 1 for a new job), ``x-jobq-max-attempts`` and ``x-jobq-enqueued-at`` (epoch
seconds, sub-second); the user's headers beside them.
Crash redeliveries add to the attempt: ``x-delivery-count`` on quorum queues, the
``redelivered`` flag on classic ones (which tells "at least once more", no more).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aio_pika
from pamqp.commands import Basic

from jobq.errors import MalformedJob
from jobq.job import Job
from jobq.transport import NewJob

ATTEMPT = "x-jobq-attempt"
MAX_ATTEMPTS = "x-jobq-max-attempts"
ERROR = "x-jobq-error"  # on a dead message: error type and message
ATTEMPTS_USED = "x-jobq-attempts"  # on a dead message: the attempts it had when it died
DEAD_AT = "x-jobq-dead-at"
# Enqueue time as float epoch seconds: the AMQP timestamp property has whole seconds only, too
# coarse for end-to-end latency.
ENQUEUED_AT = "x-jobq-enqueued-at"
DELIVERY_COUNT = "x-delivery-count"
CONTENT_TYPE = "application/json"
# Headers jobq or the broker own: never handed to the handler as the job's headers, and
# dropped (the broker's) or rewritten (jobq's) when a message is published again.
_BROKER_HEADERS = (DELIVERY_COUNT, "x-death", "x-first-death-exchange", "x-first-death-queue",
                   "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                   "x-last-death-reason")


def new_job_id() -> str:
    """A job id: a random 63-bit decimal integer, so ids look alike on both backends."""
    return str(secrets.randbits(63) or 1)


def encode(job: NewJob, *, job_id: str, max_attempts: int) -> aio_pika.Message:
    """The message for a new job; MalformedJob if kind or payload cannot make one."""
    if not job.kind:
        raise MalformedJob("kind must be a non-empty string")
    if not isinstance(job.payload, dict):
        raise MalformedJob(f"payload must be a JSON object, got {type(job.payload).__name__}")
    try:
        body = json.dumps(job.payload, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise MalformedJob(f"payload is not JSON-serialisable: {exc}") from exc
    headers: dict[str, Any] = {str(k): str(v) for k, v in job.headers.items()}
    now = datetime.now(UTC)
    headers[ATTEMPT] = 1
    headers[MAX_ATTEMPTS] = job.max_attempts or max_attempts
    headers[ENQUEUED_AT] = now.timestamp()
    return make_message(body, headers=headers, message_id=job_id, kind=job.kind, timestamp=now)


def make_message(body: bytes, *, headers: dict[str, Any], message_id: str | None, kind: str | None,
                 timestamp: datetime | None, content_type: str | None = None) -> aio_pika.Message:
    """A persistent jobq message."""
    return aio_pika.Message(
        body, headers=headers, content_type=content_type or CONTENT_TYPE,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id=message_id,
        timestamp=timestamp, type=kind,
    )


def republish(body: bytes, props: Basic.Properties, headers: Mapping[str, Any],
              drop: tuple[str, ...] = ()) -> aio_pika.Message:
    """A copy of a received message to publish again: broker headers and ``drop`` removed,
    ``headers`` set."""
    kept = {k: v for k, v in (props.headers or {}).items()
            if k not in _BROKER_HEADERS and k not in drop}
    kept.update(headers)
    return make_message(body, headers=kept, message_id=props.message_id, kind=props.message_type,
                        timestamp=props.timestamp, content_type=props.content_type)


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


def decode(body: bytes, props: Basic.Properties, *, redelivered: bool, queue: str,
           max_attempts: int, fallback_id: str) -> tuple[Job, str | None]:
    """The job a message carries and, if it is not a valid one, why (the job is then partial)."""
    headers: Mapping[str, Any] = props.headers or {}
    count = headers.get(DELIVERY_COUNT)
    redeliveries = count if type(count) is int else int(redelivered)
    job_id = props.message_id
    kind = props.message_type
    problem = None
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        payload, problem = {}, f"body is not valid JSON ({exc})"
    if not isinstance(payload, dict):
        problem = problem or f"body is not a JSON object (got {type(payload).__name__})"
        payload = {}
    if not job_id:
        problem = problem or "message has no message_id (the job id)"
    if not kind:
        problem = problem or "message has no type (the job kind)"
    job = Job(
        id=job_id or fallback_id,
        queue=queue,
        kind=kind or "",
        payload=payload,
        attempt=_int(headers.get(ATTEMPT), 1) + redeliveries,
        max_attempts=_int(headers.get(MAX_ATTEMPTS), max_attempts),
        enqueued_at=_enqueued_at(headers.get(ENQUEUED_AT), props.timestamp),
        headers={k: as_text(v) for k, v in headers.items() if not k.startswith("x-")},
    )
    return job, problem


def _enqueued_at(precise: Any, coarse: datetime | None) -> datetime | None:
    return datetime.fromtimestamp(precise, UTC) if type(precise) is float else coarse


def as_text(value: Any) -> str:
    """A header value as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
