"""`make bench-quick`: the quick side-by-side benchmark of every target, printed as a table.

It is ``python -m benchmarks --quick --scenarios drain,latency`` (real producer and consumer
processes, fresh queues, correctness checked), followed by the report's main table and goal
lines; the full report and charts stay in benchmarks/results/demo-<time>/.
"""

from __future__ import annotations

import sys
from datetime import datetime

from benchmarks.run import RESULTS
from benchmarks.run import main as run_benchmark

SCENARIOS = "drain,latency"


def main() -> int:
    """Run the quick benchmark and print its tables."""
    out = RESULTS / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    code = run_benchmark(["--quick", "--scenarios", SCENARIOS, "--out", str(out)])
    if not (out / "report.md").exists():  # no backend answered: the benchmark said why
        return code
    report = (out / "report.md").read_text(encoding="utf-8").splitlines()
    keep, printing = [], False
    for line in report:
        if line.startswith("## "):
            printing = line in ("## Results", "## Goals", "## Scaling with consumer processes (drain)")
        elif line.startswith("How to read"):
            printing = False
        if printing:
            keep.append(line)
    print("\n".join(keep))
    print(f"\nFull report, charts and raw results: {out}/")
    return code


if __name__ == "__main__":
    sys.exit(main())
