"""Handlers for tests that run the real consumer: each leaves evidence the test can check."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from jobq import Job, PermanentError


def record(directory: str, sleep_ms: float = 0.0, fail_kind: str = "") -> Any:
    """Append each job id to ``directory/<pid>.log`` (an independent completion record)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / f"{os.getpid()}.log").open("a", buffering=1, encoding="utf-8")

    async def handle(job: Job) -> None:
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if fail_kind and job.kind == fail_kind:
            raise PermanentError(f"kind {job.kind} always fails")
        out.write(f"{job.id}\n")

    return handle


def completions(dir: str | Path) -> list[str]:
    """Every job id recorded under ``dir``, one entry per completion."""
    ids: list[str] = []
    for file in Path(dir).glob("*.log"):
        ids.extend(line for line in file.read_text().splitlines() if line)
    return ids


def fail_recording(directory: str) -> Any:
    """Record ``id attempt monotonic-time`` for each attempt, then fail (retryable)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / f"{os.getpid()}.attempts").open("a", buffering=1, encoding="utf-8")

    async def handle(job: Job) -> None:
        out.write(f"{job.id} {job.attempt} {time.time():.3f}\n")
        raise ValueError(f"attempt {job.attempt} failed")

    return handle
