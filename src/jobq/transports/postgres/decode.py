"""Rows of the jobs table into Deliveries; a row that is not a valid job becomes a malformed one.

The claim returns payload and headers as JSON text (``::text``), so the size limits are checked
on the text before it is parsed, and a value Python cannot parse (nested too deeply) is a
reason, not an exception in the middle of a claim. Already decoded values are accepted too.
An eighth field, if the row has one, is lease mode's ``isolate`` (the job runs alone).
``row_to_delivery`` never raises: whatever it is given ends as a Delivery, malformed or not.
It runs for every job claimed, so a row that is plainly well formed (the common case: a
payload far under the limit, no headers) takes a short path that checks only that.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobq.config import LimitsConfig
from jobq.core.job import Delivery, Job, Spent
from jobq.core.limits import DECODER, decode_object, header_text, kind_problem

Row = Sequence[Any]
FIELDS = ("id", "kind", "payload", "headers", "attempts", "max_attempts", "created_at")
_DEFAULT_LIMITS = LimitsConfig()


def _count(value: Any, name: str, minimum: int) -> tuple[int, str | None]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value, None
    return max(minimum, 1), f"{name} is not an integer >= {minimum} (got {value!r:.40})"


def spent(used: Any, max_attempts: Any) -> Spent | None:
    """The fact for a job whose attempts were used up before this run (``used``, the row's
    ``attempts`` before the claim, >= ``max_attempts``, as another writer or an operator can
    leave a pending row): dead, unrun, as RabbitMQ's attempt header over max_attempts
    (rabbitmq/inbound.py). None for a job with an attempt left (or counts that are not ints:
    the row is malformed then)."""
    if type(used) is int and type(max_attempts) is int and used >= max_attempts:
        return Spent(f"attempt {used + 1} is over max_attempts {max_attempts} "
                     f"(column attempts: {used} used before this run)")
    return None


def row_to_delivery(row: Row, queue: str, limits: LimitsConfig | None = None) -> Delivery:
    """``(id, kind, payload, headers, attempts, max_attempts, created_at[, isolate])`` -> Delivery."""
    limits = limits or _DEFAULT_LIMITS
    return _well_formed(row, queue, limits) or _checked(row, queue, limits)


def _well_formed(row: Row, queue: str, limits: LimitsConfig) -> Delivery | None:
    """The Delivery of a row that is plainly valid, or None to check it in full (``_checked``):
    no headers, a payload JSON object whose text is under the limit even at 4 UTF-8 bytes a
    character, counts that are ints in range, a usable kind."""
    if len(row) < len(FIELDS):
        return None
    job_id, kind, raw_payload, raw_headers, attempts, max_attempts, created_at = row[:len(FIELDS)]
    if (raw_headers != "{}" or type(raw_payload) is not str or type(attempts) is not int
            or type(max_attempts) is not int or attempts < 0 or max_attempts < 1
            or 4 * len(raw_payload) > limits.max_payload or not isinstance(created_at, datetime)
            or kind_problem(kind) is not None):
        return None
    try:
        payload = DECODER.decode(raw_payload)
    except (ValueError, RecursionError):
        return None
    if type(payload) is not dict:
        return None
    job = Job(id=str(job_id), queue=queue, kind=kind, payload=payload, attempt=attempts,
              max_attempts=max_attempts, enqueued_at=created_at, headers={})
    return Delivery(job=job, handle=job_id, isolate=len(row) > len(FIELDS) and row[len(FIELDS)] is True)


def _checked(row: Row, queue: str, limits: LimitsConfig) -> Delivery:
    """Every field checked, each problem a reason: a malformed Delivery, never an exception."""
    given = list(row)
    values = given[:len(FIELDS)]
    problems: list[str | None] = []
    if len(values) < len(FIELDS):
        problems.append(f"missing fields: {', '.join(FIELDS[len(values):])}")
        values += [None] * (len(FIELDS) - len(values))
    job_id, kind, raw_payload, raw_headers, attempts, max_attempts, created_at = values
    problems.append(kind_problem(kind))
    payload, problem = decode_object(raw_payload, "payload", limits.max_payload, "limits.max_payload")
    problems.append(problem)
    headers, problem = decode_object(raw_headers, "headers", limits.max_headers, "limits.max_headers")
    problems.append(problem)
    attempt, problem = _count(attempts, "attempts", 0)
    problems.append(problem)
    most, problem = _count(max_attempts, "max_attempts", 1)
    problems.append(problem)
    job = Job(
        id=str(job_id),
        queue=queue,
        kind=kind if isinstance(kind, str) else "",
        payload=payload,
        attempt=attempt,
        max_attempts=most,
        enqueued_at=created_at if isinstance(created_at, datetime) else None,
        headers={str(k): header_text(v) for k, v in headers.items()} if headers else {},
    )
    isolate = len(given) > len(FIELDS) and given[len(FIELDS)] is True
    return Delivery(job=job, handle=job_id, malformed=next((p for p in problems if p), None),
                    isolate=isolate)
