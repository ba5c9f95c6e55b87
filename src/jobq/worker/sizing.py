"""How many deliveries the pool holds beyond its running ones, when that is left to jobq.

A buffer that is too small for short jobs costs throughput: a lease-mode claim takes at most
the pool's free room, so with 32 workers and 32 buffered no-op jobs every claim takes a few
dozen rows, and the server's per-statement cost comes back every few dozen jobs. A buffer
that is too large for long jobs costs fairness: the jobs one consumer holds wait there while
other consumers sit idle, and a shutdown hands more of them back.

So the buffer is measured in time rather than jobs: it holds about ``HOLD`` seconds of work
at the rate the pool has been settling jobs, never less than the configured floor (as large
as ``concurrency``) and never more than ``ceiling``. Jobs that take ``HOLD`` or longer each
(at any concurrency) never grow it; a drain of no-op jobs grows it to the ceiling within a
``WINDOW`` of its start.
"""

from __future__ import annotations

HOLD = 0.05  # seconds of work (at the recent settle rate) the buffer may hold
WINDOW = 0.1  # seconds between measures of the settle rate
CEILING = 256  # the buffer's size at most, when jobq sizes it


class BufferSizer:
    """The buffer's size from the settle rate of the last window (``floor`` until measured)."""

    def __init__(self, floor: int, ceiling: int, *, hold: float = HOLD,
                 window: float = WINDOW) -> None:
        self.floor = floor
        self.ceiling = max(floor, ceiling)
        self.size = floor
        self._hold = hold
        self._window = window
        self._since: float | None = None
        self._settled = 0

    @property
    def fixed(self) -> bool:
        """The size cannot move (configured, or no room between floor and ceiling)."""
        return self.ceiling == self.floor

    def measure(self, now: float, settled: int) -> int:
        """The size after ``settled`` jobs in all by ``now`` (monotonic seconds)."""
        if self._since is None:
            self._since, self._settled = now, settled
            return self.size
        elapsed = now - self._since
        if elapsed >= self._window:
            rate = (settled - self._settled) / elapsed
            self.size = min(self.ceiling, max(self.floor, round(rate * self._hold)))
            self._since, self._settled = now, settled
        return self.size
