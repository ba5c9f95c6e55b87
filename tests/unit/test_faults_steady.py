"""The steady-load fault scenarios' arithmetic (faults/timeline.py, faults/steady_report.py):
latency by phase of hand-over, the backlog and when it is back, and the verdict."""

from __future__ import annotations

import math

from benchmarks.measure import quantile as percentile
from benchmarks.processors import DEAD, DONE, Entry
from faults.backend import FinalState
from faults.report import Summary
from faults.scenarios import SCENARIOS
from faults.steady_report import Load, SteadySummary, judge, last_fault
from faults.timeline import Backlog, finishes, latencies_ms


def steady(rate: float, seconds: float, latency: float = 0.01) -> list[Entry]:
    """A record of jobs sent at ``rate`` from t=0 for ``seconds``, each ``latency`` s late."""
    return [Entry(n, n / rate + latency, n / rate, DONE) for n in range(int(rate * seconds))]


def test_a_job_counts_in_the_phase_it_was_sent_in_with_its_first_finish() -> None:
    entries = [Entry(0, 0.5, 0.0, DONE), Entry(1, 9.0, 1.0, DONE), Entry(1, 3.0, 1.0, DONE),
               Entry(2, 2.5, 2.0, DEAD)]
    f = finishes(entries)
    assert f.first == {0: 0.5, 1: 3.0} and f.duplicates == 1  # a dead entry is no finish
    assert latencies_ms(f, 0.0, 1.0) == [500.0]
    assert latencies_ms(f, 1.0, 5.0) == [2000.0]


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == 99.0 and percentile(values, 0.5) == 50.0
    assert percentile([7.0], 0.99) == 7.0 and math.isnan(percentile([], 0.5))


def test_the_backlog_is_sent_minus_finished_and_is_back_once_it_stays_down() -> None:
    entries = steady(100, 60)
    # 200 jobs sent in [30, 32) are held until 45 s (a killed consumer's, waiting out a lease).
    held = [Entry(e.n, 45.0, e.sent_at, DONE) for e in entries if 30 <= e.sent_at < 32]
    backlog = Backlog(finishes([e for e in entries if not 30 <= e.sent_at < 32] + held))
    assert backlog.at(20.0) <= 2 and 200 <= backlog.at(40.0) <= 202
    assert backlog.back_after(30.0, 10, 60.0) is not None
    assert abs(backlog.back_after(30.0, 10, 60.0) - 15.0) < 0.2  # type: ignore[operator]
    assert backlog.back_after(30.0, 10, 44.0) is None  # still held when the record ends


def test_a_clean_kill_run_passes_and_its_figures_are_the_records() -> None:
    load, scenario = Load(rate=100, warmup=0, clean=20, tail=20), SCENARIOS["kills"]
    s = SteadySummary("kills", "postgres-lease", 1, jobs=100 * 100, chaos=Summary("postgres-lease"))
    s.chaos.capacity, s.chaos.exposures = 32, 3
    entries = steady(100, 100, latency=0.010)
    judge(s, entries, FinalState(), load, scenario, clean_from=0.0, opens=20.0)
    assert s.ok, s.failures + s.chaos.failures
    assert s.chaos.lost == 0 and s.late == 0 and s.back_after == 0.0
    assert abs(s.clean_p99 - 10.0) < 1e-6 and abs(s.ratio - 1.0) < 1e-6


def test_a_lost_job_a_slow_tail_and_a_backlog_that_stays_up_each_fail_the_run() -> None:
    load, scenario = Load(rate=100, warmup=0, clean=20, tail=20), SCENARIOS["kills"]
    s = SteadySummary("kills", "postgres-lease", 1, jobs=100 * 200, chaos=Summary("postgres-lease"))
    entries = steady(100, 200)[1:]  # job 0 never finished
    # From the window on, every job takes 0.2 s: p99 x20 the clean 10 ms, and the backlog
    # (20 jobs) stays above twice the clean peak while the load goes on, 160 s past the last
    # kill.
    entries = [e if e.sent_at < 20 else Entry(e.n, e.sent_at + 0.2, e.sent_at, DONE) for e in entries]
    judge(s, entries, FinalState(), load, scenario, clean_from=0.0, opens=20.0)
    assert s.chaos.lost == 1 and s.late == 0
    assert any("p99 during the kills" in f for f in s.failures)
    assert any("throughput not back" in f for f in s.failures)
    assert "1 job(s) lost" in s.chaos.failures


def test_the_last_fault_of_a_block_ends_when_its_block_does() -> None:
    load = Load()
    assert last_fault(SCENARIOS["block"], load) == 40.0 + load.block_s
    assert last_fault(SCENARIOS["kills"], load) == 40.0
    assert last_fault(SCENARIOS["saturate"], load) == 10.0
