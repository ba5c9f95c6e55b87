"""Cancel requests (``jobq jobs cancel`` of a running job), as both claim modes read them.

The command cannot write a running job's row (in transaction mode the job's own transaction
holds it), so it leaves a request in ``<schema>.cancels`` (migration 10). A consumer reads,
about once a second while it holds jobs, which of them have one: one statement for all of
them, on a pool connection of its own (in transaction mode each job's is busy with the job).
What it found is a fact the transport reports (``Health.cancelled``); the pool cancels those
it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from jobq.core.errors import TransportError, describe
from jobq.transports.postgres.connect import Fetch

CANCEL_POLL = 1.0  # seconds between reads of the cancel requests for the jobs held


class CancelWatch:
    """The ids, among ``held()``, that have a cancel request, as last read (``ids``)."""

    def __init__(self, fetch: Fetch, held: Callable[[], Collection[int]],
                 logger: logging.Logger) -> None:
        self._fetch = fetch
        self._held = held
        self._log = logger
        self.ids: frozenset[str] = frozenset()  # replaced whole: read from the metrics thread too

    async def run(self) -> None:
        """Read again each CANCEL_POLL until cancelled; a failed read keeps the last answer."""
        failing = False
        while True:
            await asyncio.sleep(CANCEL_POLL)
            held = [job_id for job_id in self._held()]
            if not held:
                self.ids = frozenset()
                continue
            try:
                rows = await self._fetch("cancels_held", {"ids": held})
            except TransportError as exc:  # asked again next time
                if not failing:
                    self._log.warning("could not read which running jobs were cancelled (%s); "
                                      "reading again each second", describe(exc))
                failing = True
                continue
            failing = False
            self.ids = frozenset(str(row[0]) for row in rows)
