"""What both backends share at their boundary: addresses and error texts for messages, the
driver-error translation skeleton, and how a dead job's payload is shown.

Either backend package may import this module; it imports neither (nor any driver).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from jobq.config import mask_passwords
from jobq.errors import ConnectionLost, TransportError

Errors = tuple[type[BaseException], ...]


def server_address(host: str | None, port: int | str | None, default_port: int, *,
                   no_host: str = "localhost") -> str:
    """``host:port`` for messages; ``no_host`` and ``default_port`` stand in for what is not given."""
    return f"{host or no_host}:{port or default_port}"


def one_line(text: object) -> str:
    """``text`` on one line, whitespace collapsed and any ``password=...`` masked."""
    return mask_passwords(" ".join(str(text).split()))


def error_text(exc: BaseException) -> str:
    """A driver error as one line, passwords masked; its type's name if it says nothing."""
    return one_line(exc) or type(exc).__name__


@contextlib.contextmanager
def translating(what: str, *, lost: Errors, failed: Errors,
                describe: Callable[[BaseException], str]) -> Iterator[None]:
    """Driver errors into jobq's: ``lost`` ones (the link broke) into ConnectionLost, ``failed``
    ones into TransportError, each prefixed with ``what``; anything else passes through."""
    try:
        yield
    except lost as exc:
        raise ConnectionLost(f"{what}: {describe(exc)}") from exc
    except failed as exc:
        raise TransportError(f"{what}: {describe(exc)}") from exc


def shown_payload(body: str | bytes, limit: int = 500) -> Any:
    """A dead job's payload for display: parsed, or, if Python cannot parse it, its text cut short."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # a dead job may be one that could not be decoded
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
