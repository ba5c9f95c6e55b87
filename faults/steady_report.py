"""A steady-load run's figures, its verdict (faults/steady.py says what passes) and its report."""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.measure import quantile as percentile
from benchmarks.processors import Entry
from faults.backend import FinalState
from faults.report import Summary
from faults.scenarios import Scenario
from faults.timeline import Backlog, finishes, latencies_ms
from faults.verdict import duplicate_bound

LATE_MS = 1000.0  # a job this late waited out a fault (a lease, a reconnect), not a queue


@dataclass(kw_only=True)
class Load:
    """The offered load and the phases around the fault window (seconds)."""

    rate: float = 300.0
    ms: float = 5.0  # work per job
    concurrency: int = 16
    lease: float = 12.0  # the default
    block_s: float = 15.0
    warmup: float = 5.0
    clean: float = 20.0
    tail: float = 30.0  # load offered after the window: the backlog must settle within it
    drain: float = 120.0  # s after the last job was sent for every job to end
    tail_goal: float = 10.0  # kills: p99 during the faults under this times the clean p99
    back_within: float = 60.0  # s after the last fault for the backlog to be back


@dataclass
class SteadySummary:
    """One scenario on one transport: the faults' counts (``chaos``) and the load's figures."""

    scenario: str
    transport: str
    run: int
    jobs: int
    chaos: Summary
    recorded: int = 0
    clean_p50: float = math.nan
    clean_p99: float = math.nan
    fault_p50: float = math.nan
    fault_p99: float = math.nan
    fault_max: float = math.nan
    late: int = 0  # jobs sent in the window that waited LATE_MS or more: held by a fault
    back_after: float | None = None  # s after the last fault; None: never
    backlog_level: int = 0
    vacuums: int = 0  # VACUUMs of the jobs table the run ran (the server's autovacuum off)
    failures: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """p99 during the faults over the clean phase's."""
        return self.fault_p99 / self.clean_p99 if self.clean_p99 > 0 else math.nan

    @property
    def ok(self) -> bool:
        """Nothing failed."""
        return not (self.failures or self.chaos.failures)

    def line(self) -> str:
        """One summary line."""
        c, back = self.chaos, "never" if self.back_after is None else f"{self.back_after:.1f}s"
        return (f"steady {self.scenario} {self.transport} run={self.run}: jobs={self.jobs} "
                f"kills={c.kills} cut={c.terminated_backends} lost={c.lost} dead={c.dead} "
                f"unfinished={c.unfinished} duplicates={c.duplicates}/{c.duplicate_bound} "
                f"p99 clean={self.clean_p99:.1f}ms faults={self.fault_p99:.1f}ms "
                f"(x{self.ratio:.1f}) max={self.fault_max:.0f}ms late={self.late} back={back} "
                f"vacuums={self.vacuums} "
                f"{'OK' if self.ok else 'FAILED: ' + '; '.join(self.failures + c.failures)}")


def last_fault(scenario: Scenario, load: Load) -> float:
    """Seconds into the window when the last fault ends."""
    return max([at for at, _ in scenario.events] + [b + load.block_s for b in scenario.blocks])


def judge(s: SteadySummary, entries: Iterable[Entry], state: FinalState, load: Load,
          scenario: Scenario, *, clean_from: float, opens: float) -> None:
    """Fill ``s``'s figures from the record and the backend's final state; note what failed."""
    c, f = s.chaos, finishes(entries)
    c.done, c.dead, c.unfinished, c.duplicates = len(f.first), len(state.dead), state.unfinished, f.duplicates
    c.dead_reasons = dict(Counter(state.dead.values()).most_common(10))
    c.problems.extend(state.problems)  # the backend's own counters disagree (RabbitMQ)
    c.exposures += len(scenario.blocks)  # a blocked consumer may lose what it holds, as a kill
    # Jobs neither recorded, dead nor still waiting. (The record names jobs by number, the
    # backend by id: a job both recorded and dead counts twice here and shows as dead.)
    c.lost = max(0, s.jobs - len(f.first.keys() & set(range(s.jobs))) - c.dead - c.unfinished)
    c.duplicate_bound = duplicate_bound(c.capacity, c.exposures)
    s.recorded = len(f.first)
    clean, faults = latencies_ms(f, clean_from, opens), latencies_ms(f, opens, opens + scenario.window)
    s.clean_p50, s.clean_p99 = percentile(clean, 0.5), percentile(clean, 0.99)
    s.fault_p50, s.fault_p99 = percentile(faults, 0.5), percentile(faults, 0.99)
    s.fault_max = faults[-1] if faults else math.nan
    s.late = len(faults) - bisect.bisect_left(faults, LATE_MS)
    backlog = Backlog(f)
    s.backlog_level = max(10, 2 * backlog.peak(clean_from, opens))
    last_sent = max(f.sent.values(), default=opens)
    s.back_after = backlog.back_after(opens + last_fault(scenario, load), s.backlog_level,
                                      last_sent)
    if s.back_after is None or s.back_after > load.back_within:
        s.failures.append(f"throughput not back within {load.back_within:g}s of the last fault "
                          f"(nor while the load lasted)")
    if scenario.name == "kills" and not s.ratio < load.tail_goal:
        s.failures.append(f"p99 during the kills {s.ratio:.1f}x the clean phase's "
                          f"(goal under {load.tail_goal:g}x)")


def write_report(summaries: list[SteadySummary], load: Load, out: Path) -> None:
    """``out``.json (everything) and ``out``.md (one table row per run, then the failures)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"load": asdict(load), "runs": [
        asdict(s) | {"ok": s.ok, "ratio": s.ratio, "chaos": asdict(s.chaos) | {"failures": s.chaos.failures}}
        for s in summaries]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2))
    lines = ["# jobq fault suite under steady load", "", f"load: `{json.dumps(asdict(load))}`", "",
             f"{sum(s.ok for s in summaries)}/{len(summaries)} runs OK", "",
             "| scenario | transport | run | jobs | kills | connections cut | lost | dead | "
             "unfinished | duplicates / bound | p99 clean ms | p99 faults ms | ratio | "
             "max ms | late (> 1 s) | back after s | result |", "|" + "---|" * 17]
    for s in summaries:
        c = s.chaos
        back = "never" if s.back_after is None else f"{s.back_after:.1f}"
        lines.append(f"| {s.scenario} | {s.transport} | {s.run} | {s.jobs} | {c.kills} | "
                     f"{c.terminated_backends} | {c.lost} | {c.dead} | {c.unfinished} | "
                     f"{c.duplicates} / {c.duplicate_bound} | {s.clean_p99:.1f} | "
                     f"{s.fault_p99:.1f} | {s.ratio:.1f} | {s.fault_max:.0f} | {s.late} | {back} | "
                     f"{'OK' if s.ok else 'FAILED'} |")
    for s in summaries:
        for failure in s.failures + s.chaos.failures:
            lines.append(f"\n- {s.scenario} {s.transport} (run {s.run}): FAILED: {failure}")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
