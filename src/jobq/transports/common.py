"""What both backends share at their boundary: addresses and error texts for messages, the
driver-error translation skeleton, how a dead job's payload is shown, and the one match that
turns the worker's decision into the transport's own way of carrying it out.

Either backend package may import this module; it imports neither (nor any driver).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Protocol, assert_never

from jobq.config import mask_passwords
from jobq.core.attempts import AttemptError
from jobq.core.errors import ConnectionLost, TransportError
from jobq.core.job import Ack, Cancelled, Dead, Decision, Delivery, Release, RetryIn

Errors = tuple[type[BaseException], ...]


class Settles(Protocol):
    """A transport's way of carrying out each of the five decisions (``carry_out``)."""

    async def _ack(self, delivery: Delivery) -> None: ...
    async def _retry(self, delivery: Delivery, delay: float, reason: str,
                     error: AttemptError | None) -> None: ...
    async def _dead(self, delivery: Delivery, reason: str, error: AttemptError | None) -> None: ...
    async def _cancel(self, delivery: Delivery, reason: str) -> None: ...
    async def _release(self, delivery: Delivery) -> None: ...


def carry_out(transport: Settles, delivery: Delivery,
              decision: Decision) -> Coroutine[Any, Any, None]:
    """The transport's settle of ``delivery`` as ``decision`` says (``Transport.settle``
    returns or awaits it: a plain call, no coroutine of its own on the hot path)."""
    match decision:
        case Ack():
            return transport._ack(delivery)
        case RetryIn(delay=delay, reason=reason, error=error):
            return transport._retry(delivery, delay, reason, error)
        case Dead(reason=reason, error=error):
            return transport._dead(delivery, reason, error)
        case Cancelled(reason=reason):
            return transport._cancel(delivery, reason)
        case Release():
            return transport._release(delivery)
        case _:
            assert_never(decision)


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
