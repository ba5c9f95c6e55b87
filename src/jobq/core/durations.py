"""Durations as people write them in config and flags: ``30s``, ``15m``, ``12h``, ``14d`` or seconds."""

from __future__ import annotations

import math
import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_TEXT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)")
# A bound that no retention needs and every server accepts (make_interval, datetime arithmetic).
MAX_SECONDS = 100 * 365 * UNITS["d"]
EXPECTED = "a duration like 30s, 15m, 12h, 1d, 14d or a number of seconds"


def parse_duration(value: object) -> float:
    """Seconds in ``value``: a number of seconds, or text of a number and a unit (s, m, h, d).

    ValueError, saying what is expected, for anything else, for 0 or less, and past 100 years.
    """
    if isinstance(value, bool):  # YAML's yes/no/on/off: never meant as 1 or 0 seconds
        raise ValueError(f"expected {EXPECTED}, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _TEXT.fullmatch(value.strip())):
        seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"expected {EXPECTED}, got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_SECONDS:
        raise ValueError(f"expected {EXPECTED}, more than 0 and at most 36500d, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that holds it whole (``86400`` -> ``1d``, ``90`` -> ``90s``)."""
    for unit in ("d", "h", "m"):
        count = seconds / UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"
