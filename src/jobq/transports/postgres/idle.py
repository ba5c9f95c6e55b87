"""How long an idle consumer waits before it claims again: until the next delayed job is due.

A claim that finds nothing waits for a NOTIFY, but a delayed job or a retry becoming due sends
none. Waiting the whole ``postgres.poll_interval`` would run a 0.3 s delay up to a second
late; one indexed look at the queue's earliest pending ``run_at`` (``next_due``, asked only
when a claim came back empty) lets the wait end when that job is due.
"""

from __future__ import annotations

import contextlib

from psycopg_pool import AsyncConnectionPool

from jobq.core.errors import TransportError
from jobq.transports.postgres.connect import pooled
from jobq.transports.postgres.sql import Queries

SLACK = 0.005  # past the due time, so the claim that follows finds the job due
# next_due looks at jobs due from 100 ms ago on: one that became due this recently was not
# due yet when the claim before looked, so claim again at once (after SLACK).


async def idle_wait(pool: AsyncConnectionPool, queries: Queries, queue: str, longest: float,
                    seconds: float) -> float:
    """Seconds until the queue's next pending job is due, at most ``longest``.

    A job that became due within the last 100 ms was not due yet when the claim looked (it fell
    due between the claim and this look): claim again at once. The look leaves out jobs due
    longer ago, which the claim did not get because someone holds them (another consumer's
    claim; in transaction mode a running job stays pending): they would hide the next job,
    and waiting 0 for them would spin. A failed look waits ``longest``: the claim that
    follows reports the outage.
    """
    soonest: float | None = None
    with contextlib.suppress(TransportError):
        async with pooled(pool, "postgres next_due", seconds) as conn:
            cur = await conn.execute(queries["next_due"], {"queue": queue})
            row = await cur.fetchone()
            soonest = row[0] if row else None
    if soonest is None:
        return longest
    if soonest <= 0:
        return min(longest, SLACK)
    return min(longest, soonest + SLACK)
