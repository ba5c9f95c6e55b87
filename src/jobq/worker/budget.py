"""How many more jobs a process may take before it ends for its supervisor to start a new one
(``consumer.max_jobs_per_process``): one budget shared by every pool of the process.

A fetcher asks the transport for no more than is left and counts what came (``received``), so
a process with one queue takes exactly that many jobs; with several, queues receiving at the
same moment may each bring up to what was left, so at most one batch per other queue more.
Once the count is reached each fetcher ends (an idle one after its receive's wait), and its
pool finishes what it holds and stops, as ``--once`` does. Nothing is reserved: an idle queue
waiting for jobs holds none of the budget back from a busy one.
"""

from __future__ import annotations

import logging


class JobBudget:
    """The jobs this process may still take."""

    __slots__ = ("_announced", "_log", "limit", "received")

    def __init__(self, limit: int, logger: logging.Logger | None = None) -> None:
        self.limit = limit
        self.received = 0
        self._announced = False
        self._log = logger or logging.getLogger("jobq")

    @property
    def left(self) -> int:
        """How many more jobs may be asked for."""
        return max(0, self.limit - self.received)

    @property
    def spent(self) -> bool:
        """Nothing more may be taken."""
        return self.received >= self.limit

    def announce(self) -> None:
        """Say once, when the budget is spent, why the process is about to end."""
        if not self._announced:
            self._announced = True
            self._log.info("recycling: this process took %d jobs (consumer.max_jobs_per_process):"
                           " it stops once they are done, for its supervisor to start a new one",
                           self.limit)
