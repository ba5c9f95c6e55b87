"""The handler of the steady-load fault scenarios (faults/steady.py).

Each job waits ``ms`` milliseconds (I/O, the event loop free) and records its completion in
the benchmark's record (benchmarks/processors.py: ``n``, the finish time and the producer's
``sent_at`` stamp, kept through a kill -9), so the runner can tell latency per phase, backlog
over time, losses and duplicates without asking the backend.

``block_at``: the numbers ``n`` of the jobs whose handler blocks the event loop for
``block_s`` seconds (a synchronous ``time.sleep`` inside ``async def``, the mistake issue 37
names). Only a first delivery blocks: the copy another consumer runs after rescuing it
(``job.redelivered``) does not, or every rescue would block a consumer again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.processors import Recorder
from jobq import Job


def steady(dir: str, ms: float = 5.0, block_at: str = "", block_s: float = 15.0) -> Any:
    """Sleep ``ms``, record the job; the jobs ``block_at`` (comma-separated ``n``) first block
    the loop for ``block_s`` seconds."""
    rec, seconds = Recorder(dir), ms / 1000.0
    blockers = {int(n) for n in str(block_at).split(",") if n}  # one number comes as an int

    async def handle(job: Job) -> None:
        if job.payload.get("n") in blockers and not job.redelivered and job.attempt == 1:
            time.sleep(block_s)  # noqa: ASYNC251  # the handler's mistake, on purpose
        await asyncio.sleep(seconds)
        rec.job(job.payload)

    return handle
