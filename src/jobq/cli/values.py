"""The command lines' argument types: each turns one argument's text into its value, or says
what is wrong with it (argparse then exits 2 with the usage). Light imports only, as main.py."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any


def key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    from jobq.config import parse_scalar

    return key, parse_scalar(value)  # the same typing rules as the YAML values


def duration(text: str) -> float:
    from jobq.core.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def queue_shares(text: str) -> dict[str, int]:
    """``mail=4,default=8`` as {queue: concurrency} (checked further as consumer.queues)."""
    from jobq.config.rules import queue_shares as parsed

    try:
        shares: dict[str, int] = parsed(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return shares


def delay(text: str) -> float:
    from jobq.core.due import delay_problem

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    problem = delay_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def run_at(text: str) -> datetime:
    from jobq.core.due import run_at_problem

    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    problem = run_at_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value
