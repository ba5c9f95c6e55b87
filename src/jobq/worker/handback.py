"""Handing back deliveries received and never started (at shutdown, at a pause): all at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from jobq.core.errors import describe
from jobq.core.job import RELEASE, Delivery
from jobq.core.port import Transport


async def release_all(transport: Transport, unstarted: Sequence[Delivery], *, limit: float,
                      log: logging.Logger) -> int:
    """Release every one of ``unstarted`` (attempt not counted); the number released.

    All at once (a transport may write them in one statement) and within ``limit`` seconds:
    with the server gone, what is not handed back by then returns by itself (its lease
    expires, its channel closes), and the caller goes on.
    """
    releases = [asyncio.ensure_future(transport.settle(d, RELEASE)) for d in unstarted]
    if not releases:
        return 0
    _, pending = await asyncio.wait(releases, timeout=limit)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    failed = [(d, t) for d, t in zip(unstarted, releases, strict=True)
              if t in pending or t.exception() is not None]
    if failed:
        first = failed[0][1]
        error = None if first in pending else first.exception()
        why = describe(error) if error is not None else f"no answer within {limit:g}s"
        log.warning("could not release %d unstarted jobs (%s: %s); they return when their lease "
                    "expires or their channel closes", len(failed), failed[0][0].job.id, why)
    return len(unstarted) - len(failed)
