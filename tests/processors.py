"""Handlers for tests that run the real consumer: each leaves evidence the test can check."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

from jobq import Job, PermanentError, Retry


def record(directory: str, sleep_ms: float = 0.0, fail_kind: str = "", fail_rate: float = 0.0) -> Any:
    """Append each job id to ``directory/<pid>.log`` (an independent completion record).

    ``fail_rate``: that fraction of attempts fails with ``Retry(delay=0.2)`` before recording,
    so retries are exercised too (the chaos suite uses it).
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / f"{os.getpid()}.log").open("a", buffering=1, encoding="utf-8")
    rand = random.Random()

    async def handle(job: Job) -> None:
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if fail_kind and job.kind == fail_kind:
            raise PermanentError(f"kind {job.kind} always fails")
        if fail_rate and rand.random() < fail_rate:
            raise Retry(delay=0.2, reason=f"chaos: attempt {job.attempt} failed on purpose")
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


def fail_loudly(size: int = 300_000) -> Any:
    """Fail every attempt with an error message of ``size`` characters (retryable)."""

    async def handle(job: Job) -> None:
        raise ValueError("x" * size)

    return handle
