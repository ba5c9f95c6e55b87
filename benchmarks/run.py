"""``python -m benchmarks``: run scenarios against targets, write results.json, report.md, charts.

Every case gets a fresh queue/schema and real ``producer`` / ``consumer`` processes; the
targets of one case run back to back (and repeats interleave), so neighbours' noise on a
shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import report, summary
from benchmarks.harness import Case, run_case
from benchmarks.progress import Progress
from benchmarks.reach import unreachable
from benchmarks.scenarios import FULL, ON_REQUEST, QUICK, QUICK_SCENARIOS, SCENARIOS, Size, scaled
from benchmarks.spaces import Servers
from benchmarks.sysinfo import environment
from benchmarks.targets import DEFAULT_TARGETS, PEERS, TARGETS, Target

N = TypeVar("N", int, float)

RESULTS = Path(__file__).resolve().parent / "results"


def _names(text: str, known: dict[str, Any], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help="comma-separated (default: jobq's and the baselines; `peers` adds "
                        f"{', '.join(PEERS)}, which need `pip install -e '.[peers]'`)")
    p.add_argument("--scenarios", help="comma-separated (default: all but "
                   + ",".join(sorted(ON_REQUEST)) + ", which runs only when named; with --quick: "
                   + ",".join(QUICK_SCENARIOS) + ")")
    p.add_argument("--quick", action="store_true", help="small counts, fewer scenarios: under a minute")
    p.add_argument("--jobs", type=int, help="override every scenario's job count")
    p.add_argument("--repeat", type=int, default=1, help="run every case this many times (medians)")
    p.add_argument("--concurrency", type=int, help="worker concurrency of each consumer (default 32)")
    p.add_argument("--drain-consumers", type=_positive(int),
                   help="consumer process counts for drain, e.g. 1,2,4")
    p.add_argument("--rates", type=_positive(float),
                   help="offered jobs/s for latency, e.g. 300,1000 (default 1000,2000)")
    p.add_argument("--out", type=Path, help="result directory (default benchmarks/results/<time>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="a jobq setting for the jobq targets, e.g. consumer.buffer=200 (repeatable)")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    return p


def plan(targets: list[Target], scenarios: list[str], size: Size, repeat: int
         ) -> list[tuple[int, Case, Target]]:
    """Every (repeat, case, target) to run, in order."""
    steps = []
    for rep in range(repeat):
        for name in scenarios:
            for case in SCENARIOS[name](size):
                steps += [(rep, case, t) for t in targets if name in t.scenarios]
    return steps


def overrides_env(pairs: list[str]) -> dict[str, str]:
    """``consumer.buffer=200`` -> ``{"JOBQ_CONSUMER__BUFFER": "200"}`` (jobq's own env overrides)."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or "." not in key:
            raise SystemExit(f"--set expects SECTION.KEY=VALUE, got {pair!r}")
        env["JOBQ_" + key.upper().replace(".", "__")] = value
    return env


def execute(steps: list[tuple[int, Case, Target]], servers: Servers, out: Path,
            overrides: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run every step with a progress bar; a step that crashes is recorded as failed."""
    progress = Progress(len(steps))
    runs = []
    for i, (rep, case, target) in enumerate(steps):
        label = f"{case.scenario} {case.variant} {target.name}" + (f" (repeat {rep + 1})" if rep else "")
        progress.step(label)
        work = out / "runs" / f"{i:03d}-{case.scenario}-{target.name}"
        try:
            if overrides and target.family == "jobq":
                case = replace(case, env={**case.env, **overrides})
            if target.max_concurrency and case.concurrency > target.max_concurrency:
                case = replace(case, concurrency=target.max_concurrency)
            if target.job_scale != 1.0 and not case.rate:
                case = replace(case, jobs=max(100, round(case.jobs * target.job_scale)))
            result = run_case(target, case, servers, work)
        except Exception as exc:  # one broken case must not lose the others' results
            result = {"target": target.name, "scenario": case.scenario, "variant": case.variant,
                      "consumers": case.consumers, "concurrency": case.concurrency,
                      "jobs": case.jobs, "status": "failed", "problems": [f"{type(exc).__name__}: {exc}"],
                      "throughput": 0.0, "latency_ms": {}, "cdf_ms": [], "lost": None,
                      "duplicates": 0, "dead": 0, "cpu": {}, "settings": {}}
        result["repeat"] = rep
        runs.append(result)
        note = f"{label}: {result['throughput']:,.0f} jobs/s, lost {result['lost']}, {result['status']}"
        progress.finish_step(note)
    progress.close()
    return runs


def _positive(kind: Callable[[str], N]) -> Callable[[str], tuple[N, ...]]:
    """An argparse type: comma-separated numbers, each > 0."""
    def parse(text: str) -> tuple[N, ...]:
        try:
            values = tuple(kind(item) for item in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
        if not all(v > 0 for v in values):
            raise argparse.ArgumentTypeError(f"every value must be > 0, got {text!r}")
        return values
    return parse


def chosen(text: str) -> tuple[list[Target], list[Target]]:
    """The targets ``--targets`` names (``peers``: every peer), and those of them whose
    library is not installed (named on stderr: they are skipped)."""
    names = _names(text, {**TARGETS, "peers": None}, "targets")
    names = list(dict.fromkeys(p for n in names for p in (PEERS if n == "peers" else (n,))))
    targets = [TARGETS[n] for n in names]
    absent = [t for t in targets if t.module and importlib.util.find_spec(t.module) is None]
    for t in absent:
        print(f"benchmark: {t.name} is not installed (pip install -e '.[peers]'); skipping it",
              file=sys.stderr)
    return [t for t in targets if t not in absent], absent


def main(argv: list[str] | None = None) -> int:
    """Run, then write results.json, report.md and the charts; exit 1 if a run failed."""
    args = parser().parse_args(argv)
    targets, absent = chosen(args.targets)
    if not targets:
        return 1
    default = QUICK_SCENARIOS if args.quick else tuple(n for n in SCENARIOS if n not in ON_REQUEST)
    scenarios = _names(args.scenarios or ",".join(default), SCENARIOS, "scenarios")
    size = QUICK if args.quick else FULL
    if args.jobs:
        size = scaled(size, args.jobs)
    if args.concurrency:
        size = replace(size, concurrency=args.concurrency)
    if args.drain_consumers:
        size = replace(size, drain_consumers=args.drain_consumers)
    if args.rates:
        size = replace(size, rates=args.rates)
    out = args.out or RESULTS / datetime.now().strftime("%Y%m%d-%H%M%S")
    if out.is_dir() and any(out.iterdir()):
        # Its runs/ would hold another run's completion records, which the figures would count.
        parser().error(f"--out {out} is not empty: choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    servers = Servers.from_env()
    missing = unreachable(servers, {t.backend for t in targets})
    skipped = [t.name for t in targets if t.backend in missing]
    for why in missing.values():
        print(f"benchmark: {why}", file=sys.stderr)
    if skipped:
        print(f"benchmark: skipping {', '.join(skipped)}", file=sys.stderr, flush=True)
        targets = [t for t in targets if t.backend not in missing]
        if not targets:
            return 1
    started = time.monotonic()
    env = environment(servers, {t.backend for t in targets})
    runs = execute(plan(targets, scenarios, size, max(1, args.repeat)), servers, out,
                   overrides_env(args.overrides))
    results = assemble(runs, targets, scenarios, size, env, argv, time.monotonic() - started)
    write(results, out, charts=not args.no_charts)
    show_stages(results)
    print(out / "report.md")
    if skipped:
        print(f"benchmark: skipped {', '.join(skipped)} (unreachable: {', '.join(missing)})",
              file=sys.stderr)
    if absent:
        print(f"benchmark: skipped {', '.join(t.name for t in absent)} (not installed)",
              file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in runs) and not skipped and not absent else 1


def assemble(runs: list[dict[str, Any]], targets: list[Target], scenarios: list[str], size: Size,
             env: dict[str, Any], argv: list[str] | None, elapsed: float) -> dict[str, Any]:
    """The results.json document."""
    settings: dict[str, Any] = {}
    for run in runs:  # the settings each target ran with (from its first drain-like case)
        settings.setdefault(run["target"], run.get("settings", {}))
    command = "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv)
    return {
        "command": command.strip(), "elapsed_s": round(elapsed, 1), "environment": env,
        "size": asdict(size),
        "scenarios": {name: (SCENARIOS[name].__doc__ or "").strip().rstrip(".") for name in scenarios},
        "targets": {t.name: {"backend": t.backend, "family": t.family, "baseline": t.baseline,
                             "description": t.description, "goal_vs_baseline": t.goal_vs_baseline,
                             "goal_p99_ms": t.goal_p99_ms, "ceiling": t.ceiling,
                             "goal_vs_ceiling": t.goal_vs_ceiling,
                             "settings": settings.get(t.name, {}),
                             "not_run": {n: why for n, why in t.cannot.items() if n in scenarios}}
                    for t in targets},
        "summary": summary.aggregate(runs, TARGETS),
        "runs": runs,
    }


def show_stages(results: dict[str, Any]) -> None:
    """Print the latency case's stage breakdown (the report has it too), if it ran."""
    staged = report.stage_lines(results["summary"], results["targets"])
    if staged:
        print("Where a job's milliseconds go (p50 / p99 ms):", *staged, sep="\n")


def write(results: dict[str, Any], out: Path, *, charts: bool = True) -> None:
    """results.json, report.md and (unless disabled) the PNG charts."""
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    (out / "report.md").write_text(report.render(results), encoding="utf-8")
    if charts:
        from benchmarks.charts import draw_all

        draw_all(results["summary"], out)


if __name__ == "__main__":
    sys.exit(main())
