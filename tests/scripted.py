"""A deterministic handler for observability tests: the job's kind decides its fate."""

from __future__ import annotations

import asyncio
import contextlib

from jobq import Job, PermanentError, Retry


async def by_kind(job: Job) -> None:
    """``ok`` succeeds; ``flaky`` fails its first attempt (retried at once); ``bad`` dies;
    ``hold`` runs for a minute (a job caught running; stop the consumer to end it); ``deaf``
    runs for good, swallowing every cancel (a careless ``except BaseException``)."""
    if job.kind == "hold":
        await asyncio.sleep(60)
    while job.kind == "deaf":
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(60)
    if job.kind == "flaky" and job.attempt == 1:
        raise Retry(delay=0.0, reason="the first attempt fails on purpose")
    if job.kind == "bad":
        raise PermanentError("bad jobs always fail")
