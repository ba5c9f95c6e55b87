"""Recycling a consumer for its supervisor to start a new one: after so many jobs
(``consumer.max_jobs_per_process``, a budget the pools take from: worker/budget.py), or once
its resident memory is over ``consumer.max_memory_mb`` (looked at every ``MEMORY_LOOK``
seconds: one read of /proc/self/statm, nothing on a job's path). Either way the end is the
graceful stop of SIGTERM, exit 0 (docs/architecture.md, "Recycling")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import sys
from collections.abc import AsyncIterator, Sequence

from jobq.config import Settings
from jobq.worker.budget import JobBudget
from jobq.worker.pool import WorkerPool

MEMORY_LOOK = 1.0  # seconds between looks at the resident memory
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def budget_of(settings: Settings) -> JobBudget | None:
    """The process's job budget (None when there is no limit)."""
    limit = settings.consumer.max_jobs_per_process
    return JobBudget(limit) if limit > 0 else None


def resident_mb() -> float:
    """This process's resident memory now (Linux: /proc/self/statm), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB (bytes on macOS)
        return peak / (2**20 if sys.platform == "darwin" else 2**10)


async def watch_memory(limit_mb: float, pools: Sequence[WorkerPool],
                       log: logging.Logger) -> None:
    """Until cancelled: once the resident memory is over ``limit_mb``, stop ``pools``
    gracefully (once) and say why."""
    while True:
        used = resident_mb()
        if used > limit_mb:
            log.warning("recycling: resident memory %.0f MB is over consumer.max_memory_mb "
                        "(%g): stopping gracefully, for the supervisor to start a new process",
                        used, limit_mb)
            for pool in pools:
                pool.stop()
            return
        await asyncio.sleep(MEMORY_LOOK)


@contextlib.asynccontextmanager
async def recycling(settings: Settings, pools: Sequence[WorkerPool],
                    log: logging.Logger) -> AsyncIterator[None]:
    """While inside: the pools take from one job budget, and the memory is watched."""
    budget = budget_of(settings)
    if budget is not None:
        for pool in pools:
            pool.limit_to(budget)
    limit = settings.consumer.max_memory_mb
    watch = asyncio.create_task(watch_memory(limit, pools, log), name="jobq-memory") \
        if limit > 0 else None
    try:
        yield
    finally:
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
