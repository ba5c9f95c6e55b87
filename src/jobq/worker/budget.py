"""How many more jobs a process may take before it ends for its supervisor to start a new one
(``consumer.max_jobs_per_process``): one budget shared by every pool of the process.

A fetcher asks the transport for no more than is left (``take``, then ``give_back`` what the
receive did not bring), so the process takes exactly that many jobs; once it is spent, each
fetcher ends, and its pool finishes what it holds and stops, as ``--once`` does.
"""

from __future__ import annotations

import logging


class JobBudget:
    """The jobs this process may still take."""

    __slots__ = ("_announced", "_log", "limit", "remaining")

    def __init__(self, limit: int, logger: logging.Logger | None = None) -> None:
        self.limit = limit
        self.remaining = limit
        self._announced = False
        self._log = logger or logging.getLogger("jobq")

    @property
    def spent(self) -> bool:
        """Nothing more may be taken."""
        return self.remaining <= 0

    def take(self, count: int) -> int:
        """Reserve up to ``count`` jobs; how many were granted."""
        granted = min(count, self.remaining)
        self.remaining -= granted
        return granted

    def give_back(self, count: int) -> None:
        """A receive brought ``count`` fewer jobs than were reserved for it."""
        self.remaining += count

    def announce(self) -> None:
        """Say once, when the budget is spent, why the process is about to end."""
        if not self._announced:
            self._announced = True
            self._log.info("recycling: this process took %d jobs (consumer.max_jobs_per_process):"
                           " it stops once they are done, for its supervisor to start a new one",
                           self.limit)
