"""What one run of the fault suite found (Summary), its summary line, and the JSON/Markdown report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from faults.backend import Options
from faults.verdict import Counts, verdict


@dataclass
class Summary:
    """What one transport's run did and found."""

    transport: str
    run: int = 1  # which of --repeat's rounds
    jobs: int = 0
    kills: int = 0
    restarts: int = 0
    crashes: int = 0
    server_faults: list[str] = field(default_factory=list)  # each fault and when: "crash@60%"
    crash_window_jobs: int = 0  # completed in the crash windows: their commits may be undone
    terminated_backends: int = 0  # connections cut (Postgres backends, AMQP connections)
    capacity: int = 0  # what one consumer holds: concurrency + buffer, or the prefetch
    exposures: int = 0  # kills + consumers hit by each restart, crash or cut round
    duplicate_bound: int = 0
    lost: int = 0
    duplicates: int = 0
    done: int = 0
    dead: int = 0
    done_and_dead: int = 0
    unfinished: int = 0
    wall_s: float = 0.0
    survivors: int = 0
    survivors_exit_0: int = 0
    dead_reasons: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    stacks: dict[str, str] = field(default_factory=dict)  # consumer log name -> stacks, log tail

    def counts(self) -> Counts:
        """The counts the verdict is taken on."""
        return Counts(lost=self.lost, unfinished=self.unfinished, dead=self.dead,
                      done_and_dead=self.done_and_dead, duplicates=self.duplicates,
                      duplicate_bound=self.duplicate_bound, survivors=self.survivors,
                      survivors_exit_0=self.survivors_exit_0)

    @property
    def failures(self) -> list[str]:
        """Every reason the run failed: the verdict on its counts, then what else went wrong."""
        return verdict(self.counts()) + self.problems

    @property
    def ok(self) -> bool:
        """Nothing lost, no unexpected death, duplicates in bound, every survivor clean."""
        return not self.failures

    def line(self, of: int = 1) -> str:
        """The one summary line printed per transport (and round, with --repeat)."""
        round_ = f" run={self.run}/{of}" if of > 1 else ""
        return (f"chaos {self.transport}: jobs={self.jobs} kills={self.kills} "
                f"restarts={self.restarts} crashes={self.crashes} "
                f"server_faults={','.join(self.server_faults) or 'none'} "
                f"terminated_backends={self.terminated_backends} "
                f"lost={self.lost} duplicates={self.duplicates}/{self.duplicate_bound} "
                f"dead={self.dead} done_and_dead={self.done_and_dead} "
                f"unfinished={self.unfinished} survivors_exit_0={self.survivors_exit_0}/"
                f"{self.survivors} wall={self.wall_s:.1f}s{round_} "
                f"{'OK' if self.ok else 'FAILED'}")


def write_report(summaries: list[Summary], options: Options, out: Path) -> None:
    """``out``.json (everything) and ``out``.md (the table, failures, dead reasons, stacks)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"options": asdict(options),
            "runs": [asdict(s) | {"ok": s.ok, "failures": s.failures} for s in summaries]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=2))
    head = ("| transport | run | jobs | kills | server faults | connections cut | exposures | "
            "crash window jobs | lost | duplicates / bound | dead | done and dead | unfinished | "
            "survivors exit 0 | wall s | result |")
    lines = ["# jobq fault suite", "", f"options: `{json.dumps(asdict(options))}`", "",
             f"{sum(s.ok for s in summaries)}/{len(summaries)} runs OK", "", head,
             "|" + "---|" * 16]
    for s in summaries:
        lines.append(f"| {s.transport} | {s.run} | {s.jobs} | {s.kills} | "
                     f"{', '.join(s.server_faults) or 'none'} | {s.terminated_backends} | "
                     f"{s.exposures} | {s.crash_window_jobs} | {s.lost} | "
                     f"{s.duplicates} / {s.duplicate_bound} | {s.dead} | {s.done_and_dead} | "
                     f"{s.unfinished} | {s.survivors_exit_0}/{s.survivors} | {s.wall_s:.1f} | "
                     f"{'OK' if s.ok else 'FAILED'} |")
    for s in summaries:
        name = f"{s.transport} (run {s.run})"
        for reason, n in s.dead_reasons.items():
            lines.append(f"\n- {name}: {n} dead: {reason}")
        for failure in s.failures:
            lines.append(f"\n- {name}: FAILED: {failure}")
        for log, text in s.stacks.items():
            lines.extend(["", f"## {name}: {log} hung", "", "```", text.rstrip(), "```"])
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
