"""Message checks shared by every transport: what a producer may enqueue, what a consumer accepts.

At enqueue a bad job is refused with an error naming the problem (``MalformedJob``, or
``JobTooLarge`` for the size limits). On receipt the same rules turn a message that got in
anyway (an older producer, a hand-written INSERT, another client) into a reason string, and
the pool dead-letters it with that reason instead of running it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobq.core.due import due_problem
from jobq.core.errors import JobTooLarge, MalformedJob
from jobq.core.port import NewJob

MAX_KIND = 200  # characters; a kind is a routing key, not data
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$")  # a queue's, a schedule's


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """What a queue accepts: message sizes (refused at enqueue, dead-lettered on receipt) and depth."""

    max_payload: int = 1_048_576  # bytes of the payload as JSON text
    max_headers: int = 65_536  # bytes of the headers as JSON text
    max_pending: int = 0  # jobs waiting in the queue; 0: no limit
    enqueue_timeout: float = 5.0  # how long enqueue waits for room before QueueFull

# Decoding runs for every job received: the decoder's own decode() skips json.loads' argument
# checks, and '{}' (most jobs' headers) needs no decoding at all.
DECODER = json.JSONDecoder()
# Encoding runs for every job enqueued: reusing the encoders skips building one per call.
# _SPACED writes what json.dumps writes by default, _COMPACT the same without the spaces.
_SPACED = json.JSONEncoder(allow_nan=False)
_COMPACT = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def too_large(what: str, size: int, limit: int, key: str) -> str | None:
    """The reason text when ``size`` bytes exceed ``limit``, else None."""
    if size <= limit:
        return None
    return f"{what} {_is(what)} {size:,} bytes as JSON, over the limit of {limit:,} ({key})"


def _is(what: str) -> str:
    return "are" if what.endswith("s") else "is"


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when the answer is already known."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def kind_problem(kind: Any) -> str | None:
    """Why ``kind`` is not a usable kind, or None."""
    if not isinstance(kind, str):
        return f"kind is not a string (got {type(kind).__name__})"
    if not kind:
        return "kind is empty"
    if len(kind) > MAX_KIND:
        return f"kind is longer than {MAX_KIND} characters"
    if "\x00" in kind:
        return "kind contains a NUL character"
    return None


def headers_problem(headers: Mapping[Any, Any]) -> str | None:
    """Why ``headers`` are not a flat mapping of strings to scalars, or None."""
    for key, value in headers.items():
        if not isinstance(key, str):
            return f"header name {key!r} is not a string"
        if value is not None and not isinstance(value, str | int | float | bool):
            return f"header {key[:50]!r} is not a string (got {type(value).__name__})"
    return None


def header_text(value: Any) -> str:
    """A received header value as the handler gets it in ``job.headers``, the same on both
    backends (docs/wire-format.md): text as it is, nothing (JSON null, AMQP void) as "", bytes
    as UTF-8 (undecodable bytes replaced), a nested object or array as its JSON text, any other
    scalar (number, boolean, decimal, time) as Python's ``str`` of it. Never raises."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, Mapping | list | tuple):
        try:
            return json.dumps(value, ensure_ascii=False, default=_plain)
        except (ValueError, TypeError, RecursionError):
            return f"<{type(value).__name__} that cannot be shown as JSON>"
    return str(value)


def _plain(value: Any) -> Any:
    """What ``json.dumps`` writes for a value inside a header that JSON has no type for."""
    return header_text(value) if isinstance(value, bytes | bytearray) else str(value)


MAX_KEY = 255  # characters of a unique key


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a unique key (None: it can, or there is none)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        return f"key must be a non-empty string, got {key!r}"
    if len(key) > MAX_KEY:
        return f"key is {len(key)} characters long; at most {MAX_KEY}"
    if not key.isprintable():
        return f"key must be printable text (no control characters), got {key[:40]!r}"
    return None


MAX_PRIORITY = 9  # NewJob.priority: 0 (default) to this


def priority_problem(priority: object) -> str | None:
    """Why ``priority`` cannot be a job's priority (None: it can)."""
    if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
        return f"priority must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}"
    return None


def encode_new_job(job: NewJob, limits: LimitsConfig, *, compact: bool = False) -> tuple[str, str]:
    """``job``'s payload and headers as JSON text, checked against ``limits``.

    ``compact`` leaves out the spaces after separators (RabbitMQ sends that text as the body);
    the limits apply to the spaced text either way, so a job fits on both backends or neither.
    Raises MalformedJob (bad kind, key, delay or run_at, payload not a JSON object, headers not
    string to string, not serialisable) or JobTooLarge, each naming the problem.
    """
    problem = (kind_problem(job.kind) or key_problem(job.key) or due_problem(job)
               or (priority_problem(job.priority) if job.priority else None))
    if problem:
        raise MalformedJob(problem)
    if not isinstance(job.payload, Mapping):
        raise MalformedJob(f"payload must be a JSON object, got {type(job.payload).__name__}")
    if not isinstance(job.headers, Mapping):
        raise MalformedJob(f"headers must be a mapping, got {type(job.headers).__name__}")
    problem = headers_problem(job.headers)
    if problem:
        raise MalformedJob(problem)
    value = dict(job.payload)
    try:
        payload = (_COMPACT if compact else _SPACED).encode(value)
        headers = json.dumps({k: str(v) for k, v in job.headers.items()}) if job.headers else "{}"
    except (TypeError, ValueError, RecursionError) as exc:
        raise MalformedJob(f"payload is not JSON-serialisable: {exc}") from exc
    # json.dumps escapes non-ASCII, so len() is the byte size. Compact text is one character
    # shorter per separator outside strings: if it fits with every ',' and ':' counted as one,
    # the spaced text fits too, and only a payload near the limit is serialised again to measure.
    size = len(payload)
    if compact and size + payload.count(",") + payload.count(":") > limits.max_payload:
        size = len(_SPACED.encode(value))
    for what, length, limit, key in (("payload", size, limits.max_payload, "limits.max_payload"),
                                     ("headers", len(headers), limits.max_headers,
                                      "limits.max_headers")):
        reason = too_large(what, length, limit, key)
        if reason:
            raise JobTooLarge(reason)
    return payload, headers


def decode_object(raw: Any, what: str, limit: int, key: str) -> tuple[dict[str, Any], str | None]:
    """Raw message data (bytes, JSON text, or an already decoded value) into a JSON object.

    Never raises: returns ``({}, reason)`` when ``raw`` is too large, not UTF-8, not JSON, too
    deeply nested, or not an object.
    """
    value: Any = raw
    if isinstance(raw, bytes | bytearray | memoryview):
        raw = bytes(raw)
        reason = too_large(what, len(raw), limit, key)
        if reason:
            return {}, reason
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return {}, f"{what} {_is(what)} not UTF-8 ({exc.reason} at byte {exc.start})"
    if raw == "{}":
        return {}, None
    if isinstance(raw, str):
        reason = too_large(what, utf8_size(raw), limit, key)
        if reason:
            return {}, reason
        try:
            value = DECODER.decode(raw)
        except ValueError as exc:
            return {}, f"{what} {_is(what)} not JSON ({exc})"
        except RecursionError:
            return {}, f"{what} {_is(what)} nested too deeply to decode"
    if not isinstance(value, dict):
        return {}, f"{what} {_is(what)} not a JSON object (got {type(value).__name__})"
    return value, None
