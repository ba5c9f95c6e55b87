"""The scenarios: what each measures and the cases it runs, at full size and ``--quick``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.harness import Case
from benchmarks.targets import Work


@dataclass(frozen=True, kw_only=True)
class Size:
    """Knobs that set how long a run takes (``--quick`` and ``--jobs`` change them)."""

    drain_jobs: int = 20_000
    drain_consumers: tuple[int, ...] = (1, 2, 4)
    io_jobs: int = 5_000
    rates: tuple[float, ...] = (1_000.0, 2_000.0)
    latency_seconds: float = 4.0  # measured, after the warm-up
    warmup_seconds: float = 0.5
    failure_jobs: int = 5_000
    crash_jobs: int = 20_000
    backlog_jobs: int = 1_000_000
    concurrency: int = 32


FULL = Size()
QUICK_SCENARIOS = ("drain", "latency", "crash")  # --quick: speed, latency, correctness
QUICK = Size(drain_jobs=5_000, drain_consumers=(1,), io_jobs=2_000, rates=(1_000.0,),
             latency_seconds=1.0, failure_jobs=500, crash_jobs=3_000, backlog_jobs=50_000)
# Asked for by name only (--scenarios drain,backlog): a million jobs per target is a long run.
ON_REQUEST = frozenset({"backlog"})


def scaled(size: Size, jobs: int) -> Size:
    """``size`` with every job count set to ``jobs`` (tiny test runs)."""
    return Size(drain_jobs=jobs, drain_consumers=size.drain_consumers, io_jobs=jobs,
                rates=size.rates, latency_seconds=max(0.5, min(size.latency_seconds,
                                                                jobs / max(size.rates))),
                warmup_seconds=min(size.warmup_seconds, 0.2),
                failure_jobs=jobs, crash_jobs=jobs, backlog_jobs=jobs,
                concurrency=size.concurrency)


# A killed consumer's jobs come back when their lease expires: a short lease keeps the crash
# run short (RabbitMQ needs nothing: the broker requeues at once when the channel drops).
CRASH_ENV = {"JOBQ_POSTGRES__LEASE": "2", "JOBQ_POSTGRES__RESCUE_INTERVAL": "0.5"}
# Retried jobs wait a fixed short delay (the processor raises Retry(delay=0.2)).
FAILURE_WORK = Work(kind="flaky", retry_rate=0.05, fail_rate=0.01)


def drain(size: Size) -> list[Case]:
    """N pre-enqueued no-op jobs drained by 1, 2 and 4 consumer processes (``--once``)."""
    return [Case(scenario="drain", variant=f"x{n}", jobs=size.drain_jobs, consumers=n,
                 concurrency=size.concurrency) for n in size.drain_consumers]


def io(size: Size) -> list[Case]:
    """10 ms sleeping jobs at concurrency 100: ideal is concurrency / latency = 10,000 jobs/s."""
    return [Case(scenario="io", variant="10ms c100", jobs=size.io_jobs, concurrency=100,
                 work=Work(kind="sleep", sleep_ms=10.0))]


def latency(size: Size) -> list[Case]:
    """Open-loop producer at a fixed rate; send-to-completion latency after a 0.5 s warm-up."""
    seconds = size.latency_seconds + size.warmup_seconds
    return [Case(scenario="latency", variant=f"{rate:g}/s", jobs=int(rate * seconds), rate=rate,
                 warmup=size.warmup_seconds, once=False, concurrency=size.concurrency)
            for rate in size.rates]


def failures(size: Size) -> list[Case]:
    """5% of attempts fail retryably, 1% permanently: every job must end done or dead."""
    return [Case(scenario="failures", variant="5% retry 1% dead", jobs=size.failure_jobs,
                 once=False, work=FAILURE_WORK, concurrency=size.concurrency)]


def crash(size: Size) -> list[Case]:
    """Three consumers; one is killed with SIGKILL a third of the way through."""
    return [Case(scenario="crash", variant="kill -9 1 of 3", jobs=size.crash_jobs, consumers=3,
                 once=False, kill_at=1 / 3, env=CRASH_ENV, concurrency=size.concurrency)]


def backlog(size: Size) -> list[Case]:
    """A deep queue (1,000,000 no-op jobs pre-enqueued) drained by one consumer process: the
    rate as the backlog shrinks, and what the server held before and after (table and index
    sizes, dead tuples, autovacuum; queue memory). Compare with drain x1: a shallow queue."""
    jobs = size.backlog_jobs
    return [Case(scenario="backlog", variant=f"{jobs:,} deep", jobs=jobs, consumers=1,
                 concurrency=size.concurrency, storage=True,
                 timeout=max(120.0, jobs / 1_000))]  # 1,000 jobs/s at the very least


SCENARIOS: dict[str, Callable[[Size], list[Case]]] = {
    "drain": drain, "io": io, "latency": latency, "failures": failures, "crash": crash,
    "backlog": backlog,
}
