"""Repeated runs into one row per (scenario, variant, target): medians, ratios, saturation."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.measure import median
from benchmarks.targets import Target

Row = dict[str, Any]


def _key(run: Mapping[str, Any]) -> tuple[str, str, str]:
    return run["scenario"], run["variant"], run["target"]


def aggregate(runs: Sequence[Mapping[str, Any]], targets: Mapping[str, Target]) -> list[Row]:
    """One row per scenario variant and target, in the order the runs were planned."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        groups.setdefault(_key(run), []).append(run)
    rows = [_row(key, group) for key, group in groups.items()]
    by_key = {(r["scenario"], r["variant"], r["target"]): r for r in rows}
    for row in rows:
        baseline = targets[row["target"]].baseline if row["target"] in targets else None
        base = by_key.get((row["scenario"], row["variant"], baseline or ""))
        row["baseline"] = baseline if base else None
        row["vs_baseline"] = _ratio(row["throughput"], base["throughput"]) if base else None
        row["p99_vs_baseline"] = (_ratio(row["latency_ms"].get("p99", math.nan),
                                         base["latency_ms"].get("p99", math.nan))
                                  if base and row["latency_ms"] else None)
    _scaling(rows)
    _depth(rows)
    return rows


def _depth(rows: list[Row]) -> None:
    """A backlog row's rate divided by the same target's shallow drain (x1) in the run."""
    shallow = {r["target"]: r for r in rows if r["scenario"] == "drain" and r["variant"] == "x1"}
    for row in rows:
        if row["scenario"] == "backlog":
            base = shallow.get(row["target"])
            row["vs_shallow"] = _ratio(row["throughput"], base["throughput"]) if base else None


def _ratio(a: float, b: float) -> float | None:
    if not (a == a and b == b) or b <= 0:
        return None
    return round(a / b, 3)


def _median_stages(runs: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Each stage's each percentile, the median over the repeats that measured it."""
    names = sorted({(stage, p) for run in runs for stage, cut in run.items() for p in cut})
    out: dict[str, dict[str, float]] = {}
    for stage, p in names:
        out.setdefault(stage, {})[p] = round(median(run[stage][p] for run in runs
                                                    if p in run.get(stage, {})), 3)
    return out


def _row(key: tuple[str, str, str], all_runs: Sequence[Mapping[str, Any]]) -> Row:
    scenario, variant, target = key
    # A repeat that could not run (lost None: a server unreachable, say) fails the row but
    # does not drag its medians to zero.
    measured = [r for r in all_runs if r["lost"] is not None]
    group = measured or all_runs
    tps = [r["throughput"] for r in group]
    latency_keys = sorted({k for r in group for k in r["latency_ms"]})
    cpu_keys = ("consumers_per_1k", "server_per_1k", "consumer_cores", "server_cores", "host_cores")
    return {
        "scenario": scenario, "variant": variant, "target": target,
        "consumers": group[0]["consumers"], "concurrency": group[0]["concurrency"],
        "jobs": group[0]["jobs"], "repeats": len(group),
        "throughput": round(median(tps), 1), "throughput_min": min(tps), "throughput_max": max(tps),
        "throughput_all": tps,
        "latency_ms": {k: round(median(r["latency_ms"].get(k, math.nan) for r in group), 3)
                       for k in latency_keys},
        "cdf_ms": _median_run(group)["cdf_ms"],
        "stages_ms": _median_stages([r.get("stages_ms") or {} for r in group]),
        "lost": sum(r["lost"] for r in measured) if measured else None,
        "duplicates": sum(r["duplicates"] for r in group),
        "dead": round(median(r["dead"] for r in group)),
        "cpu": {**{k: _median_or_none(r["cpu"].get(k) for r in group) for k in cpu_keys},
                "server_waits": _median_waits(r["cpu"].get("server_waits") for r in group)},
        "status": "failed" if any(r["status"] != "ok" for r in all_runs) else "ok",
        "problems": sorted({p for r in all_runs for p in r["problems"]}),
        "notes": sorted({n for r in group for n in r.get("notes", [])}),
        **_deep_figures(group),
    }


def _deep_figures(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A backlog row's storage and timeline: those of its repeat of median throughput."""
    stored = [r for r in group if "storage" in r]
    if not stored:
        return {}
    run = _median_run(stored, key=lambda r: r["throughput"])
    return {"storage": run["storage"], "timeline": run.get("timeline", [])}


def _median_run(group: Sequence[Mapping[str, Any]],
                key: Callable[[Mapping[str, Any]], float] = lambda r: r["latency_ms"].get("p99", 0.0)
                ) -> Mapping[str, Any]:
    """The repeat whose ``key`` is the median one (default p99: its CDF is the one drawn)."""
    ranked = sorted(group, key=key)
    return ranked[(len(ranked) - 1) // 2]


def _median_waits(runs: Any) -> dict[str, float] | None:
    """Per wait class, the median over the repeats that have one (a class absent in a
    repeat counts as 0 there)."""
    known = [w for w in runs if w]
    if not known:
        return None
    names = sorted({name for w in known for name in w})
    return {name: round(median(w.get(name, 0.0) for w in known), 2) for name in names}


def _median_or_none(values: Any) -> float | None:
    m = median(v for v in values if v is not None)
    return None if m != m else round(m, 4)


def _scaling(rows: list[Row]) -> None:
    """Drain with k consumers against drain with one: the speed-up and what saturated."""
    one = {r["target"]: r for r in rows if r["scenario"] == "drain" and r["consumers"] == 1}
    for row in rows:
        base = one.get(row["target"])
        if row["scenario"] != "drain" or base is None or row["consumers"] == 1:
            continue
        row["speedup_vs_1"] = _ratio(row["throughput"], base["throughput"])
        row["saturated"] = saturation(row)


def saturation(row: Mapping[str, Any], cores: int | None = None) -> str:
    """Which side ran out: the consumers, the server, or the whole machine's CPU."""
    import os

    cores = cores or os.cpu_count() or 1
    cpu = row["cpu"]
    consumer, server, host = cpu["consumer_cores"], cpu["server_cores"], cpu["host_cores"]
    if consumer is None or server is None or host is None:
        return "unknown"
    per_consumer = consumer / max(row["consumers"], 1)
    others = max(host - consumer - server, 0.0)
    where = (f"consumers {consumer:.2f} cores ({per_consumer:.2f} each), server {server:.2f}, "
             f"other processes {others:.2f}, of {cores}")
    if host >= 0.85 * cores:
        return f"machine CPU ({where})"
    if per_consumer >= 0.85:
        return f"consumer CPU ({where})"
    if server >= 0.85:
        return f"server CPU ({where})"
    waits = cpu.get("server_waits")
    if not waits:
        return f"round trips / locks, no CPU saturated ({where})"
    # The server's processes, on average: waiting on WAL flushes, locks or I/O for a quarter
    # of a process or more is a limit of its own; less, and what is left is the wait between
    # round trips.
    blocked = {"WAL flushes": waits.get("wal", 0.0), "locks": waits.get("lock", 0.0),
               "I/O": waits.get("io", 0.0)}
    worst = max(blocked, key=lambda k: blocked[k])
    said = (f"server processes on average: {waits.get('cpu', 0.0):.2f} running, "
            f"{blocked['WAL flushes']:.2f} waiting on WAL flushes, {blocked['locks']:.2f} on "
            f"locks, {blocked['I/O']:.2f} on other I/O, {waits.get('client', 0.0):.2f} on their client")
    if blocked[worst] >= 0.25:
        return f"server {worst}, no CPU saturated ({where}; {said})"
    return f"round trips, no CPU saturated and few waits in the server ({where}; {said})"
