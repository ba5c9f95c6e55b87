"""What a steady-load run's completion record says, phase by phase (pure functions).

Every job carries the moment the producer handed it over (``sent_at``) and the record keeps the
moment each run of it finished. A job's latency is its first finish minus its ``sent_at``; a
phase's latencies are those of the jobs *sent* in it, so a job held by a killed consumer counts
in the phase of the kill however late it ends. The backlog at ``t`` is the jobs sent by ``t``
and not yet finished by ``t``: at a steady offered rate, throughput is back when the backlog is
back to what it was before the faults.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from benchmarks.processors import DONE, Entry

SETTLED_FOR = 5.0  # s: the backlog must stay at its clean level this long to count as back
STEP = 0.1  # s between samples of the backlog


@dataclass(frozen=True)
class Finishes:
    """Per job number, its sent stamp and first finish; and how many runs finished twice."""

    sent: dict[int, float]
    first: dict[int, float]
    duplicates: int


def finishes(entries: Iterable[Entry]) -> Finishes:
    """Fold the record's entries (any order) into each job's sent stamp and first finish."""
    sent: dict[int, float] = {}
    first: dict[int, float] = {}
    duplicates = 0
    for e in entries:
        if e.status != DONE:
            continue
        if e.n in first:
            duplicates += 1
            first[e.n] = min(first[e.n], e.finished)
        else:
            first[e.n], sent[e.n] = e.finished, e.sent_at
    return Finishes(sent, first, duplicates)


def latencies_ms(f: Finishes, start: float, end: float) -> list[float]:
    """Sorted latencies (ms) of the jobs sent in [start, end)."""
    return sorted((f.first[n] - s) * 1000 for n, s in f.sent.items() if start <= s < end)


class Backlog:
    """Jobs sent and not yet finished, at any moment (from the first finishes)."""

    def __init__(self, f: Finishes) -> None:
        self._sent = sorted(f.sent.values())
        self._done = sorted(f.first[n] for n in f.sent)

    def at(self, t: float) -> int:
        """The backlog at ``t``."""
        return bisect.bisect_right(self._sent, t) - bisect.bisect_right(self._done, t)

    def peak(self, start: float, end: float) -> int:
        """The largest backlog sampled in [start, end)."""
        samples = [self.at(start + i * STEP) for i in range(max(1, int((end - start) / STEP)))]
        return max(samples)

    def back_after(self, after: float, level: int, until: float) -> float | None:
        """Seconds after ``after`` until the backlog is at most ``level`` and stays so for
        SETTLED_FOR, by ``until`` (the last job's hand-over: while the load lasts); None if it
        never does."""
        if until < after:
            return None
        since = None
        for i in range(int(max(0.0, until - after) / STEP) + 2):
            t = min(after + i * STEP, until)  # the last sample at ``until`` itself
            if self.at(t) <= level:
                since = t if since is None else since
                if t - since >= SETTLED_FOR:
                    return since - after
            else:
                since = None
        return None
