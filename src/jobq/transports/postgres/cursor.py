"""Where a lease-mode claim starts: just past the last job this consumer claimed.

``jobs_pending_idx`` keeps an entry for every job that was pending until vacuum removes it. A
claim walks the index from the start of the queue, past the entries of every job claimed
since (dead, but still on the index's pages): in a deep queue that head grows with every
claim, and without vacuum (autovacuum is off on these machines) a drain of 1,000,000 jobs
went from 17,700 jobs/s at its start to 6,500 at its end. A claim from the cursor skips that
head: ``(run_at, id) > (the last claimed)`` is a bound of the index scan, not a filter.

What such a claim cannot see (a job released at a pause or a shutdown, rescued, retried into
the past, committed late with an earlier ``run_at``, or skipped while another consumer held
it) waits for a claim from the start: one every FULL_EVERY seconds at least, and whenever a
claim from the cursor comes back short of its limit (then at once, if it found nothing). So a
job behind the cursor is claimed at most FULL_EVERY late, and a short queue is claimed as
before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from datetime import datetime

Key = tuple[datetime, int]  # (run_at, id): the order jobs are handed out in
FULL_EVERY = 1.0  # seconds between claims from the start of the queue, at most


class ClaimCursor:
    """The key the next claim starts after, or None for a claim from the start."""

    __slots__ = ("_after", "_clock", "_full_at")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._after: Key | None = None
        self._full_at = -math.inf
        self._clock = clock

    def start(self) -> Key | None:
        """Where the next claim starts: after this key, or (None) from the start."""
        if self._after is None or self._clock() - self._full_at >= FULL_EVERY:
            return None
        return self._after

    def claimed(self, after: Key | None, keys: Iterable[Key], limit: int) -> None:
        """A claim that started ``after`` took jobs with ``keys`` (of at most ``limit``)."""
        taken = list(keys)
        if after is None:
            self._full_at = self._clock()
        if taken:
            self._after = max(taken)
        if len(taken) < limit:
            self._full_at = -math.inf  # the queue may be short or hide jobs behind: look at all
