"""Each failed attempt's error, kept with its job: ``AttemptError`` and the history's bounds.

The worker makes one for every attempt that ended in an exception (``settler``) and hands it
to the transport with its decision (``RetryIn.error``, ``Dead.error``); PostgreSQL appends it
to the row's ``errors`` column, RabbitMQ to the ``x-jobq-errors`` header the message carries
through its retries to the dead letter, the memory transport to its entry. ``jobq jobs show``
and the dashboard show them. The bounds are the same everywhere: the last ``ERRORS_KEPT``
attempts, each traceback cut to its last ``TRACEBACK_KEPT`` characters (where the exception is),
and on RabbitMQ at most ``HEADER_BUDGET`` bytes of them, so that the history fits in a header
frame however many attempts a job has.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobq.core.errors import MAX_REASON, message_of, safe_text

ERRORS_KEPT = 10  # attempts whose errors a job keeps, the latest ones
TRACEBACK_KEPT = 2000  # characters of each traceback, its end
HEADER = "x-jobq-errors"  # where a RabbitMQ message carries its history (JSON text)
# At most this many bytes of it: a header frame over the broker's frame_max (128 KiB by
# default) closes the whole connection, and a message's other headers need the rest.
HEADER_BUDGET = 12 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptError:
    """What one failed attempt raised: ``type`` (qualified name), ``message`` and
    ``traceback`` (None where it would show jobq's insides, not the handler's), and when."""

    attempt: int
    at: datetime
    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def of(cls, error: BaseException, attempt: int, *, trace: bool = True) -> AttemptError:
        """The record of ``error`` ending ``attempt`` now; ``trace``: keep its traceback."""
        kind = type(error)
        name = kind.__qualname__ if kind.__module__ == "builtins" else (
            f"{kind.__module__}.{kind.__qualname__}")
        text = None
        if trace:
            text = "".join(traceback.format_exception(error))
            if len(text) > TRACEBACK_KEPT:
                text = f"...\n{text[-TRACEBACK_KEPT:]}"
        return _bounded(attempt, datetime.now(UTC), name, message_of(error), text)

    def to_json(self) -> dict[str, Any]:
        """As stored: a JSON object with the time as ISO 8601 text."""
        return {"attempt": self.attempt, "at": self.at.isoformat(timespec="milliseconds"),
                "type": self.type, "message": self.message, "traceback": self.traceback}


def history(value: Any) -> list[AttemptError]:
    """The history as stored (a JSON list or its text; None), read leniently: whatever another
    writer left there is shown as far as it can be read, and never fails a look or a settle."""
    if isinstance(value, bytes | bytearray | str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past reading
            return [_unreadable(value)]
    if value is None:
        return []
    if not isinstance(value, list):
        return [_unreadable(value)]
    return [_entry(item) for item in value]


def appended(stored: Any, error: AttemptError, *, budget: int = HEADER_BUDGET) -> str:
    """The stored history (as ``history`` reads it) with ``error`` added, as JSON text of at
    most ``budget`` UTF-8 bytes: the oldest dropped first beyond ``ERRORS_KEPT`` entries or
    the budget, and ``error``'s own traceback, then message, cut (their ends kept) if it alone
    is larger (RabbitMQ's header)."""
    kept: Sequence[AttemptError] = [*history(stored), error][-ERRORS_KEPT:]
    entries = [_json(e) for e in kept[:-1]] + [_json(_fitted(error, budget - 2))]
    sizes = [len(text.encode()) + 2 for text in entries]
    while len(entries) > 1 and sum(sizes) > budget:
        del entries[0], sizes[0]
    return f"[{', '.join(entries)}]"


def _json(error: AttemptError) -> str:
    return json.dumps(error.to_json(), ensure_ascii=False)


def _fitted(error: AttemptError, budget: int) -> AttemptError:
    """``error`` with its traceback, then its message, halved (ends kept) until its JSON fits."""
    while len(_json(error).encode()) > budget:
        if error.traceback is not None:
            trace = error.traceback
            error = dataclasses.replace(error, traceback=_tail(trace) if len(trace) > 20 else None)
        elif len(error.message) > 20:
            error = dataclasses.replace(error, message=_tail(error.message))
        else:
            break  # a type name over the budget: it never is (200 characters at most)
    return error


def _tail(text: str) -> str:
    half = text[len(text) // 2:]
    return half if len(half) < 8 else f"...{half[3:]}"


def _entry(item: Any) -> AttemptError:
    if not isinstance(item, dict):
        return _unreadable(item)
    try:
        at = datetime.fromisoformat(str(item.get("at")))
        attempt = int(item.get("attempt", 0))
        trace = item.get("traceback")
        return _bounded(attempt, at, str(item.get("type", "?")), str(item.get("message", "")),
                        None if trace is None else str(trace))
    except Exception:  # an attempt of 1e400, a time out of range, ...: shown, never raised
        return _unreadable(item)


def _bounded(attempt: int, at: datetime, kind: str, message: str,
             trace: str | None) -> AttemptError:
    """A record whose texts every backend can store, each within its bound (made or read)."""
    return AttemptError(attempt=attempt, at=at, type=safe_text(kind, 200),
                        message=safe_text(message, MAX_REASON),
                        traceback=None if trace is None else safe_text(trace, TRACEBACK_KEPT + 400))


def _unreadable(value: Any) -> AttemptError:
    return AttemptError(attempt=0, at=datetime.fromtimestamp(0, UTC), type="?",
                        message=safe_text(f"unreadable entry: {str(value)[:200]}", 400))


def render_error(error: dict[str, Any]) -> str:
    """One attempt's error (as ``AttemptError.to_json`` gives it) for a person to read: a
    heading line, then its traceback indented (``jobq jobs show``)."""
    head = f"  attempt {error['attempt']} at {error['at']}: {error['type']}: {error['message']}"
    trace = error.get("traceback")
    if not trace:
        return head
    return head + "\n" + "\n".join(f"    {line}" for line in str(trace).rstrip().splitlines())
