"""Jobs as AMQP messages and back; a message that is not a valid job becomes a malformed Delivery.

A message: JSON object body (the payload), ``message_id`` = job id, ``type`` = kind,
``timestamp`` = enqueue time, persistent; headers ``x-jobq-attempt`` (the attempt number its
next delivery is, 1 for a new job), ``x-jobq-max-attempts`` and ``x-jobq-enqueued-at`` (epoch
milliseconds), and for a delayed job or retry ``x-jobq-due`` (epoch milliseconds: not to run
before); the user's headers beside them. Times are integers: pamqp writes a float in a header
table as a 32-bit float, 128 seconds coarse at today's epoch.
A crash redelivery (``redelivered``; on quorum queues also ``x-delivery-count`` > 0) never
runs: the consumer copies it forward marked ``x-jobq-isolate`` (on a classic queue its first
one ``x-jobq-suspect``; see ``crashes``) and ``x-jobq-redelivered``: the attempt is the
header alone, each copy carries it durably. New jobs (``encode_job``) and the retry, dead-letter
and release copies (``republish``) get their properties from one place (``properties``).
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aio_pika
from pamqp.commands import Basic

from jobq.config import LimitsConfig
from jobq.core.attempts import HEADER_BUDGET
from jobq.core.due import wait_of
from jobq.core.job import Job
from jobq.core.limits import (
    decode_object,
    encode_new_job,
    header_text,
    kind_problem,
    too_large,
    utf8_size,
)
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.checks import counter_problem, time_problem
from jobq.transports.rabbitmq.frames import Undecodable

ATTEMPT = "x-jobq-attempt"
MAX_ATTEMPTS = "x-jobq-max-attempts"
ERROR = "x-jobq-error"  # on a dead message: error type and message
ATTEMPTS_USED = "x-jobq-attempts"  # on a dead message: the attempts it had when it died
DEAD_AT = "x-jobq-dead-at"
# Enqueue time as integer epoch milliseconds: the AMQP timestamp property has whole seconds
# only, too coarse for end-to-end latency. (Older jobq wrote float seconds, which pamqp
# sends as a 32-bit float, up to 64 s off: read as seconds still, for messages already queued.)
ENQUEUED_AT = "x-jobq-enqueued-at"
DUE = "x-jobq-due"  # on a delayed job or retry: when it is due, epoch milliseconds rounded up
DELIVERY_COUNT = "x-delivery-count"
# On a copy of a crash redelivery: run it alone, so that a crash during its run is its own.
ISOLATE = "x-jobq-isolate"
# On a classic queue's copy of a first crash redelivery: it runs again with the others, and
# alone only if it comes back redelivered once more (see rmq crashes).
SUSPECT = "x-jobq-suspect"
REDELIVERED = "x-jobq-redelivered"  # on a crash copy and the job's later copies: Job.redelivered
MARKS = (ISOLATE, SUSPECT)  # the crash marks: a retry or a dead letter drops both
_DEFAULT_LIMITS = LimitsConfig()
# User headers forwarded with a retried / dead-lettered / released copy at most: under the
# broker's default frame_max (128 KiB) with room for jobq's own headers.
FORWARD_HEADERS = 96 * 1024
# jobq's own headers (x-jobq-*) are not the user's: limits.max_headers leaves them out, at both
# ends. jobq writes counters, times, two reasons of 4,000 characters at most, the attempts'
# errors (attempts.HEADER_BUDGET): more came from someone else. With FORWARD_HEADERS < frame_max.
OWN_PREFIX = "x-jobq-"
OWN_HEADERS = 12 * 1024 + HEADER_BUDGET
CONTENT_TYPE = "application/json"
PERSISTENT = int(aio_pika.DeliveryMode.PERSISTENT)
# Headers jobq or the broker own: never handed to the handler as the job's headers, and
# dropped (the broker's) or rewritten (jobq's) when a message is published again.
_BROKER_HEADERS = (DELIVERY_COUNT, "x-death", "x-first-death-exchange", "x-first-death-queue",
                   "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                   "x-last-death-reason")


def new_job_id() -> str:
    """A job id: a random 63-bit decimal integer, so ids look alike on both backends."""
    return str(secrets.randbits(63) or 1)


# What jobq publishes: the body and properties, sent as they are with basic_publish on the aiormq
# channel. An aio-pika Message would cost more per job than the rest of the encoding together.
Outgoing = tuple[bytes, Basic.Properties]


def properties(headers: dict[str, Any], *, message_id: str | None, kind: str | None,
               timestamp: datetime | None, content_type: str | None = None,
               priority: int | None = None) -> Basic.Properties:
    """The AMQP properties of every message jobq publishes: persistent, JSON unless told otherwise."""
    return Basic.Properties(content_type=content_type or CONTENT_TYPE, delivery_mode=PERSISTENT,
                            headers=headers, message_id=message_id, timestamp=timestamp,
                            message_type=kind, priority=priority)


def encode_job(job: NewJob, *, job_id: str, max_attempts: int,
               limits: LimitsConfig | None = None) -> Outgoing:
    """The message for a new job; MalformedJob / JobTooLarge if it breaks the limits."""
    # The checked JSON text is the body: the payload is serialised once.
    payload, _ = encode_new_job(job, limits or _DEFAULT_LIMITS, compact=True)
    headers: dict[str, Any] = {str(k): str(v) for k, v in job.headers.items()}
    now = datetime.now(UTC)
    headers[ATTEMPT] = 1
    headers[MAX_ATTEMPTS] = job.max_attempts or max_attempts
    stamp = now.timestamp()
    headers[ENQUEUED_AT] = math.floor(stamp * 1000)
    wait = wait_of(job, now)
    if wait > 0:
        headers[DUE] = due_ms(stamp + wait)
    return payload.encode(), properties(headers, message_id=job_id, kind=job.kind, timestamp=now,
                                        priority=job.priority or None)


def republish(body: bytes, props: Basic.Properties, headers: Mapping[str, Any],
              drop: tuple[str, ...] = (), identity: tuple[str, str] | None = None) -> Outgoing:
    """A copy of a received message to publish again: broker headers and ``drop`` removed,
    ``headers`` set.

    Headers too large to travel again are dropped (the job's and other ``x-`` headers together,
    with the drop noted; jobq's own kept ones if over ``OWN_HEADERS``): a header frame over the
    broker's frame_max closes the whole connection, so forwarding a message that came in with
    near-frame-size headers plus jobq's would fail forever and take every in-flight job of the
    consumer down with it each time.
    """
    original = props.headers if isinstance(props.headers, Mapping) else {}
    # pamqp decodes a long string that is not UTF-8 as bytes, which it cannot encode again.
    kept = {k: bytearray(v) if type(v) is bytes else v for k, v in original.items()
            if k not in _BROKER_HEADERS and k not in drop}
    others, size, own = [], 0, 0
    for k, v in kept.items():
        key = str(k)
        if key.startswith(OWN_PREFIX):
            if k not in headers:  # kept as it came: a foreign producer may have made it large
                own += utf8_size(as_text(v))
        else:
            others.append(k)
            size += len(key) + utf8_size(as_text(v))
    if size > FORWARD_HEADERS:
        for k in others:
            del kept[k]
        kept["x-jobq-headers-dropped"] = f"{len(others)} headers, about {size:,} bytes: too large to forward"
    if own > OWN_HEADERS:
        for k in [k for k in kept if str(k).startswith(OWN_PREFIX) and k not in headers]:
            del kept[k]
    kept.update(headers)
    # A property that arrived undecodable (see ``frames``) is not sent on as it came: the
    # copy must be a message every client can read.
    stamp = props.timestamp if type(props.timestamp) is datetime else None
    # A foreign message without an id or kind: the copy carries the ones it was given (identity).
    job_id, kind = identity or (None, None)
    # A retry, a release or a crash copy keeps the job's priority (NewJob.priority).
    priority = props.priority if type(props.priority) is int else None
    return body, properties(kept, message_id=_text(props.message_id) or job_id,
                            kind=_text(props.message_type) or kind, timestamp=stamp,
                            content_type=_text(props.content_type), priority=priority)


def _text(value: Any) -> str | None:
    """A short-string property as text: undecodable bytes escaped, anything else None."""
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes | bytearray) else None


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


PLAIN = ("; to take plain messages from producers that know nothing of jobq, set "
         "rabbitmq.default_kind (docs/wire-format.md)")


def _identity(props: Basic.Properties, plain: bool) -> tuple[str | None, str | None]:
    """Why the message's id or kind cannot be a job's, or None each. With ``plain`` (opted in
    with rabbitmq.default_kind) absent ones are fine: the message gets an id and that kind."""
    job_id, kind = props.message_id, props.message_type
    id_problem = None
    if job_id is None or job_id == "":
        id_problem = None if plain else "message has no message_id (the job id)" + PLAIN
    elif isinstance(job_id, Undecodable):
        id_problem = f"message_id {job_id.reason}"
    elif not isinstance(job_id, str):
        id_problem = f"message_id is not a string (got {type(job_id).__name__})"
    kind_text = None if kind is None or kind == "" else (
        f"type (the job kind) {kind.reason}" if isinstance(kind, Undecodable) else kind_problem(kind))
    if kind is None or kind == "":
        kind_text = None if plain else "message has no type (the job kind)" + PLAIN
    return id_problem, kind_text


def _user_headers(headers: Mapping[str, Any], limits: LimitsConfig) -> tuple[dict[str, str], str | None]:
    """The job's own headers (not x-) as text, and why the headers are too large, if they are.

    Every header but jobq's and the broker's counts toward ``limits.max_headers``, ``x-`` ones
    from another producer included (they travel with every copy); jobq's own get a budget of
    their own (``OWN_HEADERS``).
    """
    texts = {str(k): v if type(v) is str else as_text(v) for k, v in headers.items()
             if not str(k).startswith("x-")}
    others = len(headers) - len(texts)
    # A first delivery of a jobq message has exactly jobq's three counters besides the job's
    # (and its due time, if it was delayed).
    if others and not (3 <= others <= 4 and ATTEMPT in headers and MAX_ATTEMPTS in headers
                       and ENQUEUED_AT in headers and (others == 3 or DUE in headers)):
        foreign, own = _x_headers(headers)
        if own > OWN_HEADERS:
            return texts, (f"jobq's own headers (x-jobq-*) are about {own:,} characters, more "
                           f"than jobq writes ({OWN_HEADERS:,})")
        counted = {**texts, **foreign}
    else:
        counted = texts
    rough = sum(len(k) + len(v) + 6 for k, v in counted.items()) + 2  # about the JSON length
    if rough * 2 < limits.max_headers:
        return texts, None  # the usual case: far under the limit, not worth measuring exactly
    size = utf8_size(json.dumps(counted, ensure_ascii=False))
    return texts, too_large("headers", size, limits.max_headers, "limits.max_headers")


def _x_headers(headers: Mapping[str, Any]) -> tuple[dict[str, str], int]:
    """The x- headers neither jobq nor the broker owns, as text, and the size of jobq's own."""
    foreign: dict[str, str] = {}
    own = 0
    for k, v in headers.items():
        key = str(k)
        if not key.startswith("x-") or key in _BROKER_HEADERS:
            continue
        if key.startswith(OWN_PREFIX):
            own += 0 if type(v) is int or type(v) is float else len(as_text(v))
        else:
            foreign[key] = as_text(v)
    return foreign, own


def decode(body: bytes, props: Basic.Properties, *, queue: str, max_attempts: int,
           fallback_id: str | None = None, limits: LimitsConfig | None = None,
           default_kind: str = "") -> tuple[Job, str | None]:
    """The job a message carries and, if it is not a valid one, why (the job is then partial).

    With ``default_kind`` (``rabbitmq.default_kind``: the opt-in), a message from a producer
    that knows nothing of jobq (a JSON object body, no ``message_id``, no ``type``: what most
    AMQP clients send) is a job: its id is ``fallback_id`` or a new one, its kind
    ``default_kind``. The consumer writes both into every copy it makes, so a retry or dead
    letter keeps them. Without it such a message is malformed, saying how to opt in.

    Never raises: a body that is too large, not UTF-8, not JSON, nested too deeply or not an
    object, a missing or wrong-typed id or kind, headers that are not a table or too large, a
    property that arrived undecodable (``frames.Undecodable``) all end as the reason.
    """
    limits = limits or _DEFAULT_LIMITS
    raw_headers = props.headers
    table = _table(raw_headers)
    headers: Mapping[str, Any] = {} if table is None else table
    payload, body_problem = decode_object(body, "body", limits.max_payload, "limits.max_payload")
    id_problem, kind_problem_ = _identity(props, bool(default_kind))
    texts, headers_problem = _user_headers(headers, limits)
    if isinstance(raw_headers, Undecodable):
        headers_problem = f"headers cannot be decoded: {raw_headers.reason}"
    elif raw_headers is not None and table is None:
        headers_problem = f"headers are not a table (got {type(raw_headers).__name__})"
    stamp = props.timestamp
    problem = (body_problem or id_problem or kind_problem_ or headers_problem
               or counter_problem(headers, ATTEMPT, 1) or counter_problem(headers, MAX_ATTEMPTS, 1)
               or time_problem(headers, DUE) or time_problem(headers, ENQUEUED_AT, seconds=True)
               or (None if stamp is None or type(stamp) is datetime else _stamp_problem(stamp)))
    job_id = props.message_id if isinstance(props.message_id, str) and props.message_id else None
    kind = props.message_type if isinstance(props.message_type, str) else ""
    if props.message_type is None or props.message_type == "":
        kind = default_kind
    job = Job(
        id=job_id or fallback_id or new_job_id(),
        queue=queue,
        kind=kind,
        payload=payload,
        attempt=_int(headers.get(ATTEMPT), 1),
        max_attempts=_int(headers.get(MAX_ATTEMPTS), max_attempts),
        enqueued_at=_enqueued_at(headers.get(ENQUEUED_AT), props.timestamp),
        headers=texts,
    )
    return job, problem


def _stamp_problem(stamp: Any) -> str:
    if isinstance(stamp, Undecodable):
        return stamp.reason
    return f"timestamp is not a time (got {type(stamp).__name__})"


def _table(headers: object) -> Mapping[str, Any] | None:
    # pamqp decodes a table as a dict: checked first, an ABC isinstance costs per message.
    if type(headers) is dict:
        return headers
    return headers if isinstance(headers, Mapping) else None


def crashed(props: Basic.Properties, redelivered: bool) -> bool:
    """True for a delivery that was in flight when a consumer died or lost its channel."""
    if redelivered:
        return True
    headers = _table(props.headers)
    count = headers.get(DELIVERY_COUNT) if headers is not None else None
    return type(count) is int and count > 0


def due_ms(at: float) -> int:
    """The ``x-jobq-due`` value for epoch seconds ``at``: milliseconds, rounded up (never early)."""
    return math.ceil(at * 1000)


def due_at(props: Basic.Properties) -> float | None:
    """When the message is due (epoch seconds), if it carries a due time."""
    headers = _table(props.headers)
    due = headers.get(DUE) if headers is not None else None
    return due / 1000 if type(due) is int else None  # not a bool


def isolated(props: Basic.Properties) -> bool:
    """True for a message marked to run alone (a copy of a crash redelivery)."""
    return _marked(props, ISOLATE)


def suspected(props: Basic.Properties) -> bool:
    """True for a classic queue's copy of a first crash redelivery (``x-jobq-suspect``)."""
    return _marked(props, SUSPECT)


def _marked(props: Basic.Properties, mark: str) -> bool:
    headers = _table(props.headers)
    return headers is not None and headers.get(mark) == 1


def _enqueued_at(precise: Any, coarse: Any) -> datetime | None:
    if type(precise) is int or type(precise) is float:  # milliseconds; seconds from an older jobq
        with contextlib.suppress(ValueError, OverflowError, OSError):
            return datetime.fromtimestamp(precise / 1000 if type(precise) is int else precise, UTC)
    return coarse if isinstance(coarse, datetime) else None


def as_text(value: Any) -> str:
    """A header value as text (``limits.header_text``: the same meaning on both backends)."""
    return value.reason if isinstance(value, Undecodable) else header_text(value)
