"""The contract suite's handler: what it does depends on the job's kind; it logs every step.

Each event is one JSON line in ``<directory>/<pid>.events``: ``{"id", "kind", "attempt",
"event": "start" | "ok" | "fail", "t": epoch seconds}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from jobq import Job, PermanentError, Retry

RETRY_DELAY = 1.0


def story(directory: str, slow_ms: float = 0.0, gate: str = "") -> Any:
    """``ok`` succeeds; ``retry`` asks for RETRY_DELAY once; ``flaky`` always fails (retryable);
    ``fail`` fails permanently; ``slow`` sleeps ``slow_ms`` then succeeds; ``crash`` kills the
    process (exit 137, no clean-up)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / f"{os.getpid()}.events").open("a", buffering=1, encoding="utf-8")
    opened = Path(gate) if gate else None

    def log(job: Job, event: str) -> None:
        out.write(json.dumps({"id": job.id, "kind": job.kind, "attempt": job.attempt,
                              "event": event, "t": time.time()}) + "\n")

    async def handle(job: Job) -> None:
        log(job, "start")
        if job.kind == "retry" and job.attempt == 1:
            log(job, "fail")
            raise Retry(delay=RETRY_DELAY, reason="not yet")
        if job.kind == "flaky":
            log(job, "fail")
            raise RuntimeError(f"flaky failure on attempt {job.attempt}")
        if job.kind == "fail":
            log(job, "fail")
            raise PermanentError("this job can never work")
        if job.kind == "crash":
            os._exit(137)
        if job.kind == "slow":
            await asyncio.sleep(slow_ms / 1000)
            # A file the test makes: no asyncio.Event can see it, so it is looked for.
            while opened is not None and not opened.exists():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        log(job, "ok")

    return handle


def events(directory: str | Path) -> list[dict[str, Any]]:
    """Every event logged under ``directory``, in time order."""
    rows = [json.loads(line) for file in Path(directory).glob("*.events")
            for line in file.read_text().splitlines() if line]
    return sorted(rows, key=lambda r: r["t"])
