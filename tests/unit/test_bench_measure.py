"""The benchmark's own evidence: the completion record, its verdict, the charts (no services)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from benchmarks.charts import draw_all
from benchmarks.measure import count_entries, outcomes, quantile, stages, timeline
from benchmarks.processors import DEAD, Recorder, read_records
from benchmarks.report import backlog_lines, stage_lines
from benchmarks.summary import aggregate
from benchmarks.targets import TARGETS
from tests.conftest import ROOT


def test_lost_duplicates_and_strangers_are_counted_from_the_records(tmp_path: Path) -> None:
    one, two = Recorder(tmp_path), Recorder(tmp_path)
    for n in (0, 1, 2, 4):
        one.add(n, 0.0)
    two.add(2, 0.0)  # done twice: a duplicate
    two.add(5, 0.0, DEAD)  # dead-lettered: resolved, not lost
    two.add(99, 0.0)  # never enqueued
    out = outcomes(tmp_path, enqueued=7)
    assert (out.done, out.dead, out.lost, out.duplicates, out.unexpected) == (5, 1, 2, 1, 1)
    assert not out.complete()
    assert count_entries(tmp_path) == 7


def test_the_record_grows_past_its_first_mapping_and_survives_kill_9(tmp_path: Path) -> None:
    code = ("import os, sys; from benchmarks.processors import Recorder; r = Recorder(sys.argv[1]);"
            "[r.add(n, 1.0) for n in range(40000)]; os.kill(os.getpid(), 9)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == -signal.SIGKILL
    entries = list(read_records(tmp_path))
    assert [e.n for e in entries] == list(range(40000))  # 40,000 x 48 bytes > the 1 MiB map


def test_latency_leaves_the_warm_up_out_and_percentiles_are_nearest_rank(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    rec.add(0, 100.0)  # sent at 100.0, finished "now": huge, but inside the warm-up
    for n in range(1, 101):
        rec.add(n, 1e10)  # sent in the future relative to its finish: negative, but stamped
    out = outcomes(tmp_path, enqueued=101, warmup=0.5)
    assert len(out.latencies_ms) == 100 and out.warmup_max_ms > 0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and quantile([1.0, 2.0], 0.99) == 2.0


def test_the_stages_split_each_jobs_time_and_leave_the_warm_up_out(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    # Job n sent at t, enqueued 1 ms later, started 2 + n/100 ms after that, ran 0.5 ms.
    for n in range(101):
        t = 1000.0 + n * 0.01
        rec.add(n, t, started=t + 0.003 + n / 1e5, enqueued=t + 0.001)
    rec.add(101, 999.0)  # sent before all the others: the warm-up's start, and unstamped
    entries = list(read_records(tmp_path))
    # The records' finish times are the real clock's: give them the handler's 0.5 ms instead.
    entries = [e if e.started == 0 else type(e)(e.n, e.started + 0.0005, e.sent_at, e.status,
                                                 e.started, e.enqueued) for e in entries]
    settled = {e.n: e.finished + 0.004 for e in entries}
    cut = stages(entries, warmup=1.0, settled=settled)
    assert cut["enqueue"]["p50"] == 1.0 and cut["handler"]["p99"] == 0.5
    assert round(cut["to_start"]["p50"], 3) == 2.5 and round(cut["to_start"]["p99"], 3) == 2.99
    assert cut["settle"]["p99"] == 4.0 and round(cut["to_settled"]["p50"], 3) == 8.0
    assert stages([e for e in entries if e.started == 0]) == {}  # a peer's: nothing stamped
    lines = stage_lines([{"scenario": "latency", "variant": "1000/s", "target": "postgres-lease",
                          "stages_ms": cut}, {"scenario": "latency", "variant": "1000/s",
                                               "target": "pgqueuer", "stages_ms": {},
                                               "latency_ms": {"p50": 3.0, "p99": 9.0}}])
    assert len(lines) == 4 and lines[2].startswith("| postgres-lease | 1000/s | 1.00 / 1.00")
    assert lines[3] == "| pgqueuer | 1000/s | - | - | - | 3.00 / 9.00 | - | - | - |"  # total only
    assert lines[2].endswith("| - |")  # no settings given: durability unknown
    lines = stage_lines([{"scenario": "latency", "variant": "1000/s", "target": "postgres-lease",
                          "stages_ms": cut}], {"postgres-lease": {"settings": {
                              "commit": "claims and acks synchronous_commit=off"}}})
    assert lines[2].endswith("| claims and acks synchronous_commit=off |")


def _run(target: str, scenario: str, variant: str, tps: float, **extra: object) -> dict[str, object]:
    return {"target": target, "scenario": scenario, "variant": variant, "consumers": 1,
            "concurrency": 32, "jobs": 100, "throughput": tps, "latency_ms": extra.get("lat", {}),
            "cdf_ms": extra.get("cdf", []), "lost": 0, "duplicates": 0, "dead": 0,
            "cpu": {"consumers_per_1k": 0.01, "server_per_1k": 0.01, "consumer_cores": 0.5,
                    "server_cores": 0.5, "host_cores": 1.0}, "status": "ok", "problems": []}


def test_ratios_medians_and_charts_from_a_summary(tmp_path: Path) -> None:
    lat = {"p50": 2.0, "p95": 4.0, "p99": 5.0, "max": 6.0}
    runs = [_run("postgres-lease", "drain", "x1", v) for v in (30.0, 10.0, 20.0)]
    runs += [_run("raw-psycopg", "drain", "x1", 40.0),
             _run("postgres-lease", "latency", "1000/s", 1000.0, lat=lat, cdf=[1.0, 2.0, 6.0]),
             _run("raw-psycopg", "latency", "1000/s", 1000.0, lat={**lat, "p99": 10.0})]
    rows = {(r["scenario"], r["target"]): r for r in aggregate(runs, TARGETS)}
    lease = rows[("drain", "postgres-lease")]
    assert lease["throughput"] == 20.0 and lease["repeats"] == 3 and lease["vs_baseline"] == 0.5
    assert rows[("latency", "postgres-lease")]["p99_vs_baseline"] == 0.5
    written = {p.name for p in draw_all(list(rows.values()), tmp_path)}
    assert written == {"throughput.png", "latency.png", "latency_cdf.png"}


def test_server_waits_are_averaged_over_the_window_and_name_the_limit() -> None:
    from benchmarks.cpu import Waits
    from benchmarks.summary import saturation

    waits = Waits()
    for at, counts in ((1.0, {"cpu": 2}), (2.0, {"cpu": 1, "lock": 1}), (3.0, {"lock": 2}),
                       (9.0, {"client": 5})):
        waits.add(at, counts)
    assert waits.mean(1.5, 3.5) == {"cpu": 0.5, "lock": 1.5}
    assert waits.mean(4.0, 8.0) is None  # no snapshot inside the window

    def row(server_waits: dict[str, float] | None) -> dict[str, object]:
        return {"consumers": 2, "cpu": {"consumer_cores": 0.6, "server_cores": 0.7, "host_cores": 1.4,
                                        "server_waits": server_waits}}

    assert saturation(row(None), cores=2).startswith("round trips / locks, no CPU saturated")
    assert saturation(row({"cpu": 0.7, "lock": 0.6, "client": 3.0}), cores=2).startswith(
        "server locks, no CPU saturated")
    assert saturation(row({"cpu": 0.3, "wal": 1.2, "lock": 0.3}), cores=2).startswith(
        "server WAL flushes, no CPU saturated")
    few = saturation(row({"cpu": 0.7, "lock": 0.1, "io": 0.05, "client": 3.0}), cores=2)
    assert few.startswith("round trips, no CPU saturated") and "0.10 on locks" in few
    assert saturation({**row(None), "cpu": {"consumer_cores": 0.6, "server_cores": 0.7,
                                            "host_cores": 1.9}}, cores=2).startswith("machine CPU")
    from benchmarks.report import server_wait_lines

    drain = {"scenario": "drain", "consumers": 1, "target": "postgres-transaction",
             "cpu": {"server_waits": {"client": 2.0, "cpu": 0.5, "wal": 1.0}}}
    assert server_wait_lines([drain, {**drain, "consumers": 2}]) == [
        "- postgres-transaction: running 0.50, waiting on WAL flushes 1.00, on their client 2.00"]


def test_the_timeline_gives_the_rate_over_each_slice_of_the_drain() -> None:
    # 100 outcomes: 100/s up to the 51st, then 10/s.
    finished = [i * 0.01 for i in range(51)] + [0.5 + (i + 1) * 0.1 for i in range(49)]
    points = timeline(finished, 100, points=2)
    assert [left for left, _ in points] == [50, 1]
    assert points[0][1] == 100.0 and 9.9 < points[1][1] < 10.1
    assert timeline([1.0], 1) == []


def test_a_backlog_row_is_divided_by_its_shallow_drain_and_reported(tmp_path: Path) -> None:
    storage = {"before": {"table_bytes": 2**20, "indexes_bytes": 2**19, "total_bytes": 2**21,
                          "live_tuples": 100, "dead_tuples": 0, "autovacuum_runs": 0,
                          "last_autovacuum": None, "autovacuum_setting": "off"},
               "after": {"table_bytes": 2**21, "indexes_bytes": 2**20, "total_bytes": 2**22,
                         "live_tuples": 100, "dead_tuples": 100, "autovacuum_runs": 0,
                         "last_autovacuum": None, "autovacuum_setting": "off"}}
    deep = {"storage": storage, "timeline": [(50, 9.0), (0, 7.0)]}
    runs = [_run("postgres-lease", "drain", "x1", 20.0), _run("raw-psycopg", "drain", "x1", 40.0),
            {**_run("postgres-lease", "backlog", "100 deep", 16.0), **deep},
            {**_run("raw-psycopg", "backlog", "100 deep", 20.0), **deep}]
    rows = aggregate(runs, TARGETS)
    lease = next(r for r in rows if r["scenario"] == "backlog" and r["target"] == "postgres-lease")
    assert lease["vs_shallow"] == 0.8 and lease["timeline"] == [(50, 9.0), (0, 7.0)]
    text = "\n".join(backlog_lines(rows))
    assert "= 0.80x its drain x1" in text and "above raw-psycopg's 0.50x — meets" in text
    assert "table 1.0 MiB / 2.0 MiB" in text and "dead tuples 0 / 100" in text
    assert "autovacuum off, ran 0 times" in text
    assert "backlog.png" in {p.name for p in draw_all(rows, tmp_path)}


def test_a_drain_is_set_against_its_backends_ceiling_in_rate_and_cpu() -> None:
    from benchmarks.report import ceiling_lines

    def drain(target: str, tps: float, cpu: float) -> dict[str, object]:
        return {"target": target, "throughput": tps, "cpu": {"consumers_per_1k": cpu}}

    lines = ceiling_lines("postgres-lease", {"goal_vs_ceiling": 0.8},
                          drain("postgres-lease", 36_000, 0.014), drain("raw-pg-min", 50_000, 0.006))
    assert lines[0].endswith("goal ≥ 0.8x — **misses**") and "0.72x raw-pg-min" in lines[0]
    assert "2.33x raw-pg-min's 0.0060 s; goal ≤ 1.5x — **misses**" in lines[1]
    assert ceiling_lines("postgres-lease", {}, drain("postgres-lease", 1, 0.1), None) == []


def test_the_stages_chart_is_drawn_for_the_latency_rows_that_have_stages(tmp_path: Path) -> None:
    from benchmarks.charts import stages as draw_stages

    cut = {"enqueue": {"p50": -0.5, "p99": 0.1}, "to_start": {"p50": 2.0, "p99": 5.0},
           "handler": {"p50": 0.01, "p99": 0.02}, "total": {"p50": 2.1, "p99": 5.4}}
    rows = [{"scenario": "latency", "variant": "1000/s", "target": "rabbitmq-quorum",
             "stages_ms": cut}, {"scenario": "drain", "variant": "x1", "target": "raw-pika"}]
    draw_stages(rows, tmp_path / "stages.png")
    assert (tmp_path / "stages.png").read_bytes()[:4] == b"\x89PNG"
    draw_stages(rows[1:], tmp_path / "none.png")  # no stages: no chart
    assert not (tmp_path / "none.png").exists()
