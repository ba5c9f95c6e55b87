"""`make demo`: enqueue 10,000 no-op jobs and drain them with the real consumer, per transport.

Runs the installed ``jobq``, ``producer`` and ``consumer`` commands as separate processes and
prints one row per transport.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
COUNT = 10_000
TRANSPORTS = ("postgres", "rabbitmq")


def run(*argv: str) -> None:
    """Run one jobq command; stop the demo with its output if it fails."""
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")


def drain(transport: str) -> dict[str, float]:
    """Enqueue COUNT jobs on a fresh queue, drain them with one consumer, return its stats."""
    queue = f"demo-{int(time.time())}"
    common = ["--config", str(CONFIGS / f"{transport}.yaml"), "--queue", queue,
              "--log-level", "warning"]
    run("jobq", "init", *common)
    run("producer", *common, "--count", str(COUNT))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        started = time.monotonic()
        run("consumer", *common, "--once", "--concurrency", "64", "--stats-json", out.name)
        wall = time.monotonic() - started
        stats: dict[str, float] = json.loads(Path(out.name).read_text())
    stats["wall"] = wall
    return stats


def main() -> None:
    """Print the side-by-side table."""
    print(f"{COUNT:,} no-op jobs, one consumer process, concurrency 64\n")
    print(f"| {'transport':<10} | {'done':>6} | {'dead':>4} | {'jobs/s':>8} | {'process s':>9} |")
    print(f"|{'-' * 12}|{'-' * 8}|{'-' * 6}|{'-' * 10}|{'-' * 11}|")
    for transport in TRANSPORTS:
        s = drain(transport)
        print(f"| {transport:<10} | {int(s['ok']):>6} | {int(s['dead']):>4} | "
              f"{s['jobs_per_second']:>8,.0f} | {s['wall']:>9.2f} |")


if __name__ == "__main__":
    main()
