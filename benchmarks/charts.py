"""PNG charts of a run: throughput per scenario and target, latency percentiles and CDF, and
where a job's time goes (the latency stages)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib import ticker

Row = dict[str, Any]
COLORS = {  # one colour per target, baselines in grey shades, peers in their own hues
    "postgres-lease": "#1f77b4", "postgres-transaction": "#6baed6", "raw-psycopg": "#7f7f7f",
    "raw-psycopg-one": "#bdbdbd", "rabbitmq-quorum": "#ff7f0e", "rabbitmq-classic": "#fdae6b",
    "raw-aio-pika": "#a6a6a6", "raw-aio-pika-classic": "#d0d0d0", "raw-pika": "#525252",
    "raw-pika-classic": "#969696", "pgqueuer": "#2ca02c", "procrastinate": "#98df8a",
    "dramatiq": "#9467bd", "celery": "#8c564b",
}
PEERS = frozenset({"pgqueuer", "procrastinate", "dramatiq", "celery"})  # dashed in line charts
WIDE = 3e4  # a log axis spanning more than this ratio is labelled 1, 10, 100 ... only


def _color(target: str) -> str:
    return COLORS.get(target, "#17becf")  # a target not listed: a hue no listed one uses


def _style(target: str) -> str:
    return "--" if target in PEERS else "-"


def _log_ms(axis: Any) -> None:
    """A log axis labelled 1, 2, 5, 10, 20, 50 ... (plain numbers, no minor labels)."""
    axes = axis.axes  # get_xlim/get_ylim apply any pending autoscale first
    low, high = axes.get_xlim() if axis is axes.xaxis else axes.get_ylim()
    subs = (1.0,) if low > 0 and high / low > WIDE else (1.0, 2.0, 5.0)
    axis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _panels(rows: Sequence[Row], scenario_filter: Any) -> dict[str, list[Row]]:
    panels: dict[str, list[Row]] = {}
    for r in rows:
        if scenario_filter(r["scenario"]):
            panels.setdefault(f"{r['scenario']} {r['variant']}", []).append(r)
    return panels


def throughput(rows: Sequence[Row], path: Path) -> None:
    """One panel per scenario variant, a bar per target (median; whiskers: min and max)."""
    panels = _panels(rows, lambda s: s != "latency")
    if not panels:
        return
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 0.5 + 2.6 * nrows), squeeze=False)
    for ax, (title, group) in zip(axes.flat, panels.items(), strict=False):
        names = [r["target"] for r in group]
        values = [r["throughput"] for r in group]
        low = [max(v - r["throughput_min"], 0) for v, r in zip(values, group, strict=True)]
        high = [max(r["throughput_max"] - v, 0) for v, r in zip(values, group, strict=True)]
        bars = ax.barh(names, values, xerr=[low, high], color=[_color(n) for n in names],
                       edgecolor=["red" if r["status"] != "ok" else "none" for r in group])
        for bar, value, r in zip(bars, values, group, strict=True):
            ax.text(max(value, r["throughput_max"]), bar.get_y() + bar.get_height() / 2,
                    f"  {value:,.0f}", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.invert_yaxis()
        ax.set_xlabel("jobs/s")
        ax.xaxis.set_major_locator(ticker.MaxNLocator(5))  # five-digit labels must not run together
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v else "0"))
        ax.set_xlim(0, max([*values, *(r["throughput_max"] for r in group), 1]) * 1.35)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("Throughput (median of repeats; red edge = a run failed its correctness check)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency(rows: Sequence[Row], path: Path) -> None:
    """Per offered rate: p50 / p95 / p99 / max per target, log scale."""
    panels = _panels(rows, lambda s: s == "latency")
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.4), squeeze=False)
    marks = ("p50", "p95", "p99", "max")
    for ax, (title, group) in zip(axes.flat, panels.items(), strict=True):
        width = 0.8 / max(len(group), 1)
        for i, r in enumerate(group):
            xs = [j + i * width for j in range(len(marks))]
            ys = [r["latency_ms"].get(m, 0) or 0 for m in marks]
            ax.bar(xs, ys, width, label=r["target"], color=_color(r["target"]))
        ax.set_xticks([j + width * (len(group) - 1) / 2 for j in range(len(marks))], marks)
        ax.set_yscale("log")
        _log_ms(ax.yaxis)
        ax.set_ylabel("ms, send to completion")
        ax.set_title(f"latency at {title.split()[-1]} offered", fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_cdf(rows: Sequence[Row], path: Path) -> None:
    """Per offered rate: the fraction of jobs done within x ms, one line per target."""
    panels = _panels(rows, lambda s: s == "latency")
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.4), squeeze=False)
    for ax, (title, group) in zip(axes.flat, panels.items(), strict=True):
        for r in group:
            points = r["cdf_ms"]
            if points:
                fractions = [i / (len(points) - 1) for i in range(len(points))]
                ax.plot([max(p, 0.01) for p in points], fractions, label=r["target"],
                        color=_color(r["target"]), linestyle=_style(r["target"]))
        ax.set_xscale("log")
        _log_ms(ax.xaxis)
        ax.set_xlabel("ms, send to completion")
        ax.set_ylabel("fraction of jobs")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"latency CDF at {title.split()[-1]} offered", fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def backlog(rows: Sequence[Row], path: Path) -> None:
    """Jobs/s against jobs still waiting, one line per target (the deep-queue drain)."""
    deep = [r for r in rows if r["scenario"] == "backlog" and r.get("timeline")]
    if not deep:
        return
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for r in deep:
        left, rates = zip(*r["timeline"], strict=True)
        ax.plot(left, rates, label=r["target"], color=_color(r["target"]))
    ax.invert_xaxis()  # the drain goes left to right
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("jobs still waiting")
    ax.set_ylabel("jobs/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("deep queue: drain rate as the backlog shrinks", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STAGE_COLORS = (("enqueue", "#c7c7c7"), ("to_start", "#1f77b4"), ("handler", "#2ca02c"),
                ("settle", "#ff7f0e"))


def stages(rows: Sequence[Row], path: Path) -> None:
    """Per offered rate: each target's stages, p50 of each stacked (a stage below 0, RabbitMQ's
    floored enqueue stamp or transaction mode's settle, as 0), a diamond at the total's p99."""
    staged = [r for r in rows if r["scenario"] == "latency" and r.get("stages_ms")]
    panels = _panels(staged, lambda s: True)
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 0.9 + 0.45 * max(
        len(g) for g in panels.values())), squeeze=False)
    for ax, (title, group) in zip(axes.flat, panels.items(), strict=True):
        names = [r["target"] for r in group]
        left = [0.0] * len(group)
        for stage, color in STAGE_COLORS:
            widths = [max(r["stages_ms"].get(stage, {}).get("p50", 0.0), 0.0) for r in group]
            ax.barh(names, widths, left=left, color=color, label=f"{stage} p50")
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.scatter([r["stages_ms"]["total"]["p99"] for r in group], names, marker="D", s=18,
                   color="black", zorder=3, label="total p99")
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title(f"where a job's time goes at {title.split()[-1]} offered", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_all(rows: Sequence[Row], directory: Path) -> list[Path]:
    """Write every chart that has data; return the files written."""
    written = []
    for name, draw in (("throughput.png", throughput), ("latency.png", latency),
                       ("latency_cdf.png", latency_cdf), ("backlog.png", backlog),
                       ("stages.png", stages)):
        path = directory / name
        draw(rows, path)
        if path.exists():
            written.append(path)
    return written
