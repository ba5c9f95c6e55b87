"""Cancel requests (``jobq jobs cancel`` of a running job), as both claim modes read them.

The command cannot write a running job's row (in transaction mode the job's own transaction
holds it), so it leaves a request in ``<schema>.cancels`` (migration 10). The pool asks its
transport about once a second which of its running jobs have one (``Transport.cancelled``);
this is that question, one statement for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobq.job import Delivery
from jobq.transports.postgres.connect import Fetch


async def cancel_requested(fetch: Fetch, running: Sequence[Delivery]) -> list[Delivery]:
    """Those of ``running`` with a cancel request; ``fetch(name, params)`` runs the named
    statement with the transport's deadline and returns its rows."""
    by_id = {int(d.job.id): d for d in running if d.job.id.isdigit()}
    if not by_id:
        return []
    rows = await fetch("cancels_held", {"ids": list(by_id)})
    return [by_id[row[0]] for row in rows if row[0] in by_id]
