"""Checks of jobq's own headers on a received message (``x-jobq-*``: counters and times),
each giving the reason the message is not a job, or None. A foreign producer may leave them
out; one it sets must have the type and range docs/wire-format.md gives, the same rules as
the PostgreSQL columns they stand for (migration 13)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def counter_problem(headers: Mapping[str, Any], name: str, minimum: int) -> str | None:
    """Why jobq's counter header ``name`` is unusable; absent is fine (a foreign producer)."""
    value = headers.get(name)
    if value is None or (type(value) is int and value >= minimum):
        return None
    return f"header {name} is not an integer >= {minimum} (got {type(value).__name__} {value!r:.40})"


# The times a job may carry, as PostgreSQL's jobs_times_check (migration 13) admits them: what
# Python's datetime holds, a day's margin each side (epoch milliseconds).
EARLIEST_MS = -62_135_510_400_000  # 0001-01-02 UTC
LATEST_MS = 253_402_128_000_000  # 9999-12-30 UTC


def time_problem(headers: Mapping[str, Any], name: str, *, seconds: bool = False) -> str | None:
    """Why jobq's time header ``name`` (integer epoch milliseconds) is unusable; absent is fine.
    With ``seconds``, a float is read as epoch seconds (what an older jobq wrote)."""
    value = headers.get(name)
    if value is None:
        return None
    if seconds and type(value) is float and math.isfinite(value):
        value = value * 1000
    elif type(value) is not int:
        return (f"header {name} is not an integer, epoch milliseconds "
                f"(got {type(value).__name__} {value!r:.40})")
    if not EARLIEST_MS <= value <= LATEST_MS:
        return f"header {name} is out of range ({value!r:.40}: years 1 to 9999 only)"
    return None
