"""results.json into report.md: the main table, the goals, scaling, settings and environment."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.summary import Row


def _num(value: Any, digits: int = 0) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def main_table(rows: Sequence[Row]) -> list[str]:
    """One line per scenario variant and target (medians over repeats)."""
    out = ["| scenario | variant | target | procs | jobs | jobs/s | x baseline | p50 ms | p95 ms | p99 ms "
           "| max ms | lost | dup | dead | consumer CPU s/1k | server CPU s/1k | status |",
           "|" + "---|" * 17]
    for r in rows:
        lat, cpu = r["latency_ms"], r["cpu"]
        ratio = r["vs_baseline"] if r["scenario"] != "latency" else r["p99_vs_baseline"]
        ratio_text = _ratio(ratio) + (" p99" if r["scenario"] == "latency" and ratio else "")
        status = "ok" if r["status"] == "ok" else "**FAILED**"
        out.append(
            f"| {r['scenario']} | {r['variant']} | {r['target']} | {r['consumers']} "
            f"| {r['jobs']:,} | {_num(r['throughput'])} | {ratio_text} | {_num(lat.get('p50'), 1)} "
            f"| {_num(lat.get('p95'), 1)} | {_num(lat.get('p99'), 1)} | {_num(lat.get('max'), 1)} "
            f"| {'?' if r['lost'] is None else r['lost']} | {r['duplicates']} | {r['dead']} "
            f"| {_num(cpu['consumers_per_1k'], 3)} "
            f"| {_num(cpu['server_per_1k'], 3)} | {status} |")
    return out


def goal_lines(rows: Sequence[Row], targets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The issue's speed goals, each as measured in this run."""
    by = {(r["scenario"], r["variant"], r["target"]): r for r in rows}
    out = []
    for name, t in targets.items():
        one = by.get(("drain", "x1", name))
        if t.get("goal_vs_baseline") and one and one["vs_baseline"] is not None:
            base = by[("drain", "x1", one["baseline"])]
            verdict = "meets" if one["vs_baseline"] >= t["goal_vs_baseline"] else "**misses**"
            out.append(f"- {name}, drain, 1 consumer: {_num(one['throughput'])} jobs/s = "
                       f"{one['vs_baseline']:.2f}x {one['baseline']} ({_num(base['throughput'])} "
                       f"jobs/s); goal ≥ {t['goal_vs_baseline']}x — {verdict}")
        out += ceiling_lines(name, t, one, by.get(("drain", "x1", t.get("ceiling") or "")))
        at_1k = by.get(("latency", "1000/s", name))
        if t.get("goal_p99_ms") and at_1k and "p99" in at_1k["latency_ms"]:
            p99 = at_1k["latency_ms"]["p99"]
            verdict = "meets" if p99 <= t["goal_p99_ms"] else "**misses**"
            out.append(f"- {name}, latency at 1,000 jobs/s: p99 {p99:.1f} ms; goal ≤ "
                       f"{t['goal_p99_ms']:g} ms — {verdict}")
        two = by.get(("drain", "x2", name))
        if t["family"] == "jobq" and two and two.get("speedup_vs_1") is not None:
            verdict = "meets" if two["speedup_vs_1"] >= 1.6 else "below"
            out.append(f"- {name}, 2 consumers vs 1: {two['speedup_vs_1']:.2f}x (goal ≥ 1.6x where "
                       f"the server is not the bottleneck — {verdict}); saturated: {two['saturated']}")
    return out


def ceiling_lines(name: str, target: Mapping[str, Any], one: Row | None,
                  ceiling: Row | None) -> list[str]:
    """The drain x1 against the backend's fastest bare loop, rate and consumer CPU per job."""
    if not one or not ceiling or not ceiling["throughput"]:
        return []
    ratio = one["throughput"] / ceiling["throughput"]
    goal = target.get("goal_vs_ceiling")
    verdict = "" if not goal else (f"; goal ≥ {goal}x — " + ("meets" if ratio >= goal
                                                             else "**misses**"))
    out = [f"- {name}, drain, 1 consumer: {ratio:.2f}x {ceiling['target']}, the ceiling "
           f"({_num(one['throughput'])} against {_num(ceiling['throughput'])} jobs/s){verdict}"]
    mine, theirs = one["cpu"].get("consumers_per_1k"), ceiling["cpu"].get("consumers_per_1k")
    if mine and theirs:
        cpu = mine / theirs
        out.append(f"- {name}, consumer CPU per 1,000 jobs: {mine:.4f} s, {cpu:.2f}x "
                   f"{ceiling['target']}'s {theirs:.4f} s; goal ≤ 1.5x — "
                   + ("meets" if cpu <= 1.5 else "**misses**"))
    return out


def scaling_lines(rows: Sequence[Row]) -> list[str]:
    """Drain speed-up with more consumer processes, and which side ran out."""
    out = []
    for r in rows:
        if r.get("speedup_vs_1") is not None:
            out.append(f"- {r['target']} x{r['consumers']}: {r['speedup_vs_1']:.2f}x one consumer; "
                       f"saturated: {r['saturated']}")
    return out


def server_wait_lines(rows: Sequence[Row]) -> list[str]:
    """What the Postgres backends were doing during the one-process drains, on average."""
    out = []
    for r in rows:
        waits = r["cpu"].get("server_waits")
        if r["scenario"] == "drain" and r["consumers"] == 1 and waits:
            shown = ", ".join(f"{name} {waits[k]:.2f}" for k, name in WAIT_NAMES.items() if k in waits)
            out.append(f"- {r['target']}: {shown}")
    return out


DEEP_GOAL = 0.8  # issue: a 1,000,000-job backlog drains at >= 0.8x the 20,000-job rate


def _size(value: Any) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def backlog_lines(rows: Sequence[Row]) -> list[str]:
    """Each target's deep-queue drain against its shallow one, and what the server held."""
    out = []
    deep = [r for r in rows if r["scenario"] == "backlog"]
    ratios = {r["target"]: r.get("vs_shallow") for r in deep}
    for r in deep:
        ratio = r.get("vs_shallow")
        line = (f"- {r['target']}, {r['jobs']:,} jobs deep: {_num(r['throughput'])} jobs/s = "
                f"{_ratio(ratio)} its drain x1 in this run")
        if r["target"] == "postgres-lease" and ratio is not None:
            raw = ratios.get("raw-psycopg")
            verdict = "meets" if ratio >= DEEP_GOAL and (raw is None or ratio > raw) else "**misses**"
            line += (f" (goal ≥ {DEEP_GOAL}x and above raw-psycopg's {_ratio(raw)} — {verdict})")
        out.append(line)
        stored = r.get("storage", {})
        before, after = stored.get("before", {}), stored.get("after", {})
        if "total_bytes" in before:
            out.append(
                f"  - jobs table before / after: table {_size(before['table_bytes'])} / "
                f"{_size(after.get('table_bytes'))}, indexes {_size(before['indexes_bytes'])} / "
                f"{_size(after.get('indexes_bytes'))}, dead tuples {_num(before['dead_tuples'])} "
                f"/ {_num(after.get('dead_tuples'))}; autovacuum "
                f"{after.get('autovacuum_setting', '?')}, ran "
                f"{_num((after.get('autovacuum_runs') or 0) - (before['autovacuum_runs'] or 0))} "
                "times during the drain")
        elif "memory_bytes" in before:
            out.append(f"  - work queue before / after: {_num(before['messages'])} / "
                       f"{_num(after.get('messages'))} messages, memory "
                       f"{_size(before['memory_bytes'])} / {_size(after.get('memory_bytes'))}")
        elif before or after:
            out.append(f"  - storage: {before.get('error') or after.get('error')}")
        points = r.get("timeline") or []
        if points:
            shown = ", ".join(f"{left:,} left: {_num(rate)}/s"
                              for left, rate in points[:: max(1, len(points) // 5)])
            out.append(f"  - rate as it drained: {shown} (chart: backlog.png)")
    return out


WAIT_NAMES = {"cpu": "running", "wal": "waiting on WAL flushes", "lock": "on locks",
              "io": "on other I/O", "client": "on their client", "other": "other"}


def peer_lines(rows: Sequence[Row], targets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each peer's drain x1, io and latency beside jobq's target of the same backend, and the
    scenarios it does not run, with the reason."""
    peers = [n for n, t in targets.items() if t.get("family") == "peer"]
    if not peers:
        return []
    by = {(r["scenario"], r["variant"], r["target"]): r for r in rows}
    cases = sorted({(r["scenario"], r["variant"]) for r in rows
                    if r["target"] in peers and (r["scenario"], r["variant"]) != ("drain", "x2")
                    and (r["scenario"], r["variant"]) != ("drain", "x4")})
    mine = {"postgres": "postgres-lease", "rabbitmq": "rabbitmq-classic"}
    out = ["| case | peer | peer | jobq | jobq's edge (>1: jobq better) |",
           "|---|---|---:|---:|---:|"]
    for name in peers:
        ours = mine[targets[name]["backend"]]
        for scenario, variant in cases:
            peer, jobq = by.get((scenario, variant, name)), by.get((scenario, variant, ours))
            if peer is None:
                continue
            if scenario == "latency":
                p99, j99 = peer["latency_ms"].get("p99"), (jobq or {}).get("latency_ms", {}).get("p99")
                shown = (f"p99 {_num(p99, 1)} ms", f"p99 {_num(j99, 1)} ms ({ours})",
                         _ratio(p99 / j99 if p99 and j99 else None))  # lower is better
            else:
                shown = (f"{_num(peer['throughput'])} jobs/s",
                         f"{_num(jobq['throughput'])} jobs/s ({ours})" if jobq else "-",
                         _ratio(jobq["throughput"] / peer["throughput"]
                                if jobq and peer["throughput"] else None))
            out.append(f"| {scenario} {variant} | {name} | {' | '.join(shown)} |")
    for name in peers:
        for scenario, why in targets[name].get("not_run", {}).items():
            out.append(f"\n- {name} does not run **{scenario}**: {why}")
    return out


def settings_table(targets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each target's description and effective settings."""
    out = ["| target | what | settings |", "|---|---|---|"]
    for name, t in targets.items():
        shown = ", ".join(f"{k}={v}" for k, v in t.get("settings", {}).items())
        out.append(f"| {name} | {t['description']} | {shown} |")
    return out


def environment_lines(env: Mapping[str, Any]) -> list[str]:
    """The machine and software the numbers come from."""
    out = [f"- CPU: {env['cpu_model']} x {env['cpu_count']}, {env['memory_gb']} GiB, "
           f"kernel {env['kernel']}; load average at start {env['load_average_at_start']}",
           f"- Python {env['python']}; " + ", ".join(f"{k} {v}" for k, v in env["libraries"].items()),
           f"- jobq commit {env['commit']}"]
    if "postgres" in env:
        out.append("- PostgreSQL: " + ", ".join(f"{k}={v}" for k, v in env["postgres"].items()))
    if "rabbitmq" in env:
        out.append("- RabbitMQ: " + ", ".join(f"{k}={v}" for k, v in env["rabbitmq"].items()))
    return out


READING = """\
How to read it: *jobs/s* is the median over repeats of completions per second between the first
and the last completion (process start-up left out), counted from the benchmark's own
completion records. *x baseline* divides it by the bare-client baseline of the same backend in
the same run (for latency rows: p99 divided by the baseline's p99, lower is better). Latency is
from the producer's send time to the completion, same clock, leaving out the jobs sent in the
first 0.5 s (warm-up; their worst case is in results.json as warmup_max_ms). *lost* = enqueued jobs neither
completed nor dead-lettered (any lost job fails the run; "?" when a repeat could not run at
all, e.g. a server was unreachable); *dup* = completions beyond one per
job (at-least-once: expected after a crash). CPU columns are CPU seconds per 1,000 jobs inside
the completion window (sampled from /proc every 20 ms): the consumer processes and the server
processes doing this run's work (Postgres: this run's backends; RabbitMQ: the whole broker node, which
other users of the broker also load)."""


def render(results: Mapping[str, Any]) -> str:
    """The whole report.md."""
    rows, targets = results["summary"], results["targets"]
    failed = [r for r in rows if r["status"] != "ok"]
    verdict = (f"**{len(failed)} of {len(rows)} rows FAILED** (see Problems)." if failed
               else f"All {len(rows)} rows correct: lost 0 everywhere.")
    parts = [f"# jobq benchmark — {results['environment']['date']}", "",
             f"Command: `{results['command']}` ({results['elapsed_s']:.0f} s). {verdict}", "",
             "## Results", "", *main_table(rows), "", READING, ""]
    goals = goal_lines(rows, targets)
    if goals:
        parts += ["## Goals", "", *goals, ""]
    deep = backlog_lines(rows)
    if deep:
        parts += ["## Deep queue (backlog)", "",
                  "One consumer process drains a queue that holds every job from the start; "
                  "*x drain x1* divides its rate by the same target's 20,000-job drain in the "
                  "same run. The table figures come from pg_stat_user_tables and the size "
                  "functions, the queue's from `rabbitmqctl list_queues` (messages, memory).",
                  "", *deep, ""]
    scaling = scaling_lines(rows)
    if scaling:
        parts += ["## Scaling with consumer processes (drain)", "", *scaling, ""]
    stages = stage_lines(rows, results["targets"])
    if stages:
        parts += ["## Where a job's milliseconds go (latency)", "",
                  "Each stage's p50 / p99 in ms, from stamps on each job: the producer's send, "
                  "the backend's enqueue stamp (`Job.enqueued_at`), the handler's start and end, "
                  "and on PostgreSQL the outcome's `finished_at`. *to start* holds the wake-up, "
                  "the claim or delivery, the pool's buffer and the event loop's lag; *settle* "
                  "the wait for the ack batch and its statement. Percentiles of stages do not "
                  "add up to the total's.", "", *stages, ""]
    waits = server_wait_lines(rows)
    if waits:
        parts += ["## Where the Postgres backends' time went (drain, 1 process)", "",
                  "Backends of the run by what they were doing, on average over the completion "
                  "window (pg_stat_activity, sampled every 20 ms): a commit that waits for its "
                  "WAL flush, a row or buffer lock, or the next message of its client, the "
                  "round trip.", "", *waits, ""]
    peers = peer_lines(rows, targets)
    if peers:
        parts += ["## jobq or a peer library?", "",
                  "The same cases, the same completion record, each peer run as its "
                  "documentation runs it (settings below); *x baseline* is against the same "
                  "bare loop as jobq's. What a peer does not run, and why:", "", *peers, ""]
    parts += ["## Targets and settings", "", *settings_table(targets), "",
              "Scenarios: " + "; ".join(f"**{k}**: {v}" for k, v in results["scenarios"].items()), "",
              "## Environment", "", *environment_lines(results["environment"]), ""]
    if failed:
        parts += ["## Problems", ""]
        parts += [f"- {r['scenario']} {r['variant']} {r['target']}: {p}" for r in failed
                  for p in r["problems"]]
        parts.append("")
    noted = [f"- {r['scenario']} {r['variant']} {r['target']}: {n}" for r in rows
             for n in r.get("notes", [])]
    if noted:
        parts += ["## Notes", "", *noted, ""]
    parts += ["Charts: ![throughput](throughput.png) ![latency](latency.png) "
              "![latency CDF](latency_cdf.png)"
              + (" ![stages](stages.png)" if stages else ""), ""]
    return "\n".join(parts)


STAGE_COLUMNS = (("enqueue", "enqueue"), ("to_start", "to start"), ("handler", "handler"),
                 ("total", "total (latency)"), ("settle", "settle"), ("to_settled", "to settled"))


def stage_lines(rows: Sequence[Mapping[str, Any]],
                targets: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """The stage breakdown table of the latency rows, with each target's durability (its
    commits, or publisher confirms) when ``targets`` (results.json's) says. A row without
    stages (a peer's, a raw loop's: their processors stamp no start) shows its total only."""
    if not any(r["scenario"] == "latency" and r.get("stages_ms") for r in rows):
        return []
    staged = [{**r, "stages_ms": r.get("stages_ms") or {"total": r["latency_ms"]}}
              for r in rows if r["scenario"] == "latency"
              and (r.get("stages_ms") or r.get("latency_ms"))]
    out = ["| target | offered | " + " | ".join(title for _, title in STAGE_COLUMNS)
           + " | durability |", "| --- | --- |" + " ---: |" * len(STAGE_COLUMNS) + " --- |"]
    for r in staged:
        cells = []
        for key, _ in STAGE_COLUMNS:
            cut = r["stages_ms"].get(key)
            cells.append(f"{cut['p50']:.2f} / {cut['p99']:.2f}" if cut else "-")
        cells.append(durability((targets or {}).get(r["target"], {}).get("settings", {})))
        out.append(f"| {r['target']} | {r['variant']} | " + " | ".join(cells) + " |")
    return out


def durability(settings: Mapping[str, Any]) -> str:
    """What a target's settings say of its commits (PostgreSQL) or confirms (RabbitMQ)."""
    said = [str(settings[k]) for k in ("commit", "publisher_confirms") if settings.get(k)]
    return "; ".join(said) or "-"


def load(path: str) -> dict[str, Any]:
    """Read a results.json."""
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data
