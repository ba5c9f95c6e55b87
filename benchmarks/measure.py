"""From a case's completion records to its figures: correctness, throughput, latency."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processors import DEAD, DONE, ENTRY, Entry, read_records

PERCENTILES = (50, 95, 99)
CDF_POINTS = 101  # latency quantiles kept per run for the CDF chart (0%, 1%, ..., 100%)


def count_entries(directory: Path) -> int:
    """How many outcomes are recorded so far (cheap: finds each file's end by bisection)."""
    total = 0
    for file in directory.glob("*.rec"):
        data = file.read_bytes()
        lo, hi = 0, len(data) // ENTRY.size
        while lo < hi:  # entries are written in order: the first empty one marks the end
            mid = (lo + hi) // 2
            if ENTRY.unpack_from(data, mid * ENTRY.size)[-1] == 0:
                hi = mid
            else:
                lo = mid + 1
        total += lo
    return total


@dataclass(frozen=True, kw_only=True)
class Outcomes:
    """What the records say about a case whose producer enqueued jobs 0..enqueued-1."""

    enqueued: int
    entries: int
    done: int  # distinct jobs completed
    dead: int  # distinct jobs dead-lettered (and never completed)
    lost: int  # enqueued but neither completed nor dead-lettered
    duplicates: int  # outcomes recorded beyond one per job
    unexpected: int  # recorded ids the producer never sent (must be 0)
    first: float  # wall-clock time of the first and the last recorded outcome
    last: float
    latencies_ms: list[float]  # completion - send time, stamped jobs after the warm-up, sorted
    warmup_max_ms: float  # the worst latency among the warm-up jobs (left out of the above)

    @property
    def span(self) -> float:
        """Seconds from the first to the last recorded outcome."""
        return max(self.last - self.first, 0.0)

    def throughput(self) -> float:
        """Outcomes per second over the completion span (start-up and shutdown left out)."""
        return (self.entries - 1) / self.span if self.entries > 1 and self.span > 0 else 0.0

    def complete(self) -> bool:
        """Every enqueued job has an outcome."""
        return self.lost == 0


def outcomes(directory: Path, enqueued: int, warmup: float = 0.0) -> Outcomes:
    """Read every record under ``directory`` and check it against ``range(enqueued)``."""
    entries = list(read_records(directory))
    return summarise(entries, enqueued, warmup)


def summarise(entries: Sequence[Entry], enqueued: int, warmup: float = 0.0) -> Outcomes:
    """The figures of a list of recorded outcomes.

    Latency leaves out jobs sent in the first ``warmup`` seconds (connections, prepared
    statements and caches warming up); they still count for correctness.
    """
    seen = Counter(e.n for e in entries)
    done = {e.n for e in entries if e.status == DONE}
    dead = {e.n for e in entries if e.status == DEAD} - done
    valid = range(enqueued)
    resolved = done | dead
    stamped = [e for e in entries if e.status == DONE and e.sent_at > 0]
    steady_from = min((e.sent_at for e in stamped), default=0.0) + warmup
    latencies = sorted((e.finished - e.sent_at) * 1000.0 for e in stamped if e.sent_at >= steady_from)
    warm = [(e.finished - e.sent_at) * 1000.0 for e in stamped if e.sent_at < steady_from]
    return Outcomes(
        enqueued=enqueued, entries=len(entries), done=len(done), dead=len(dead),
        lost=sum(1 for n in valid if n not in resolved),
        duplicates=sum(count - 1 for count in seen.values()),
        unexpected=sum(1 for n in seen if n not in valid),
        first=min((e.finished for e in entries), default=0.0),
        last=max((e.finished for e in entries), default=0.0),
        latencies_ms=latencies, warmup_max_ms=max(warm, default=0.0),
    )


def stages(entries: Sequence[Entry], warmup: float = 0.0,
           settled: Mapping[int, float] | None = None) -> dict[str, dict[str, float]]:
    """Where a job's milliseconds go, p50/p95/p99 of each stage, over the stamped jobs sent
    after the warm-up (as ``summarise``'s latency):

    - ``enqueue``: the producer's stamp to the backend's (``Job.enqueued_at``: PostgreSQL's
      insert, whose ``now()`` is its transaction's start; RabbitMQ's publisher, just before the
      publish, in whole milliseconds floored: up to 1 ms early, so it reads below 0);
    - ``to_start``: that to the handler's start (a wake-up, a claim or a delivery, the time in
      the pool's buffer, the event loop's lag);
    - ``handler``: the handler (the record processor: a memory copy);
    - ``settle``: the handler's end to the outcome written (PostgreSQL: ``finished_at``, when
      given ``settled``: the ``now()`` of the ack's statement, so it includes the wait for the
      ack batch; in transaction mode the claim's transaction, begun before the handler, writes
      it, so there it reads below 0 and says how long before the handler the claim began);
    - ``total``: sent to the handler's end (the latency figure), and ``to_settled``.

    Empty when the processor stamped no start (the peers', the baselines').
    """
    sent = [e for e in entries if e.status == DONE and e.sent_at > 0]
    steady_from = min((e.sent_at for e in sent), default=0.0) + warmup  # as summarise's
    steady = [e for e in sent if e.sent_at >= steady_from and e.started > 0]
    if not steady:
        return {}
    spans: dict[str, list[float]] = {
        "enqueue": [e.enqueued - e.sent_at for e in steady if e.enqueued > 0],
        # From the later of the two stamps: RabbitMQ's is in whole milliseconds, floored,
        # so it reads up to 1 ms before the producer's.
        "to_start": [e.started - max(e.enqueued, e.sent_at) for e in steady],
        "handler": [e.finished - e.started for e in steady],
        "total": [e.finished - e.sent_at for e in steady]}
    if settled:
        spans["settle"] = [settled[e.n] - e.finished for e in steady if e.n in settled]
        spans["to_settled"] = [settled[e.n] - e.sent_at for e in steady if e.n in settled]
    return {name: {f"p{p}": round(quantile(ms, p / 100), 3) for p in PERCENTILES}
            for name, values in spans.items() if values
            for ms in [sorted(v * 1000.0 for v in values)]}


def timeline(finished: Sequence[float], enqueued: int, points: int = 50
             ) -> list[tuple[int, float]]:
    """The drain's rate as it went: (jobs still to do, jobs/s) over each ``1/points`` of the
    outcomes in completion order, from ``finished`` (each outcome's wall-clock time)."""
    times = sorted(finished)
    if len(times) < 2:
        return []
    step = max(1, len(times) // points)
    out = []
    for start in range(0, len(times) - 1, step):
        end = min(start + step, len(times) - 1)
        took = times[end] - times[start]
        out.append((max(enqueued - end, 0), round((end - start) / took, 1) if took > 0 else 0.0))
    return out


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest-rank."""
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_summary(sorted_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max and mean, in milliseconds."""
    if not sorted_ms:
        return {}
    out = {f"p{p}": round(quantile(sorted_ms, p / 100), 3) for p in PERCENTILES}
    out["max"] = round(sorted_ms[-1], 3)
    out["mean"] = round(sum(sorted_ms) / len(sorted_ms), 3)
    return out


def cdf(sorted_ms: Sequence[float]) -> list[float]:
    """Latency at 0%, 1%, ..., 100% of jobs (for the CDF chart)."""
    if not sorted_ms:
        return []
    return [round(quantile(sorted_ms, i / (CDF_POINTS - 1)) if i else sorted_ms[0], 3)
            for i in range(CDF_POINTS)]


def median(values: Iterable[float]) -> float:
    """The median of the finite values (NaN if none)."""
    finite = sorted(v for v in values if v == v)
    if not finite:
        return math.nan
    mid = len(finite) // 2
    return finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2
