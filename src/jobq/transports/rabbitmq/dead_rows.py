"""Dead letters on RabbitMQ as rows: what `jobq dead list`, `jobq jobs show` and `jobq move`
read off a message in ``<q>.dead``, from jobq's headers or the broker's ``x-death``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from jobq.core import attempts
from jobq.core.port import DeadJob, JobInfo
from jobq.transports.common import shown_payload
from jobq.transports.rabbitmq.codec import ATTEMPT, ATTEMPTS_USED, DEAD_AT, ERROR, MAX_ATTEMPTS, as_text

DEAD_HEADERS = (ERROR, ATTEMPTS_USED, DEAD_AT)  # dropped when a dead letter is requeued


def dead_row(message: AbstractIncomingMessage) -> DeadJob:
    """A dead message as the same row `jobq dead list` shows for Postgres."""
    headers = message.headers or {}
    death = _first_death(headers)
    error = headers.get(ERROR)
    if error is None and death:  # dead-lettered by the broker itself (x-delivery-limit, ...)
        error = (f"dead-lettered by RabbitMQ: {as_text(death.get('reason'))} "
                 f"from {as_text(death.get('queue'))}")
    finished = headers.get(DEAD_AT, death.get("time"))
    return DeadJob(
        id=message.message_id, kind=message.type,
        attempts=_count(headers.get(ATTEMPTS_USED, headers.get(ATTEMPT))),
        max_attempts=_count(headers.get(MAX_ATTEMPTS)),
        last_error=None if error is None else as_text(error),
        finished_at=finished if finished is None or isinstance(finished, datetime | str)
        else as_text(finished), payload=shown_payload(message.body),
        errors=tuple(attempts.history(headers.get(attempts.HEADER))))


def as_info(dead: DeadJob) -> JobInfo:
    return JobInfo(id=dead.id, kind=dead.kind, state="dead", payload=dead.payload,
                   attempts=dead.attempts, max_attempts=dead.max_attempts,
                   last_error=dead.last_error, finished_at=dead.finished_at, errors=dead.errors)


def dead_at(message: AbstractIncomingMessage) -> datetime | None:
    """When a dead letter died: jobq's ``x-jobq-dead-at`` (ISO text), else the broker's
    ``x-death`` time; None when neither says (a letter of unknown age, never pruned)."""
    headers = message.headers or {}
    at = headers.get(DEAD_AT, _first_death(headers).get("time"))
    if isinstance(at, bytes):
        at = as_text(at)
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at)
        except ValueError:
            return None
    if not isinstance(at, datetime):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # AMQP timestamps are UTC


def _first_death(headers: Mapping[str, Any]) -> Mapping[str, Any]:
    """The broker's latest dead-lettering of a message (``x-death``'s first entry), or {}."""
    deaths = headers.get("x-death")
    return deaths[0] if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict) else {}


def _count(value: object) -> int | None:
    # jobq writes these headers as ints; another client's value of another type is not a count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None
