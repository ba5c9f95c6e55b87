"""Every jobq queue of the dashboard's backends, not only the configured ones.

Each configured queue's backend is asked for the queues it holds (``Admin.queues``: the
PostgreSQL table's, the broker's with jobq's topology); a queue not shown yet gets a
``Source`` of its own, appended to the list the pages show. The list only grows, so a
queue's page number never changes while the dashboard runs; a queue that went away shows
empty, as a configured one would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from jobq.core.errors import ConfigError, describe
from jobq.dashboard.sources import Source, SourceDown

FIND_EVERY = 2.0  # seconds: a page load asks again only after this long
log = logging.getLogger("jobq.dashboard")


class Discovery:
    """Adds a Source for each queue found on the backends of the configured ones."""

    def __init__(self, sources: list[Source], make: Callable[[Source, str], Source]) -> None:
        """``sources``: the configured queues, and the list the pages show (grown in place);
        ``make(configured, name)``: a Source for queue ``name`` on ``configured``'s backend."""
        self._sources = sources
        self._make = make
        # One question per backend (two configured queues may share one): the first there.
        firsts: dict[tuple[str, str], Source] = {}
        for src in sources:
            firsts.setdefault((src.transport, src.home), src)
        self._asked = list(firsts.values())
        self._lock = asyncio.Lock()
        self._last = -FIND_EVERY
        # Why a backend could not list its queues, by the configured source asked; the overview
        # shows them (its own queues still show).
        self.problems: dict[str, str] = {}

    async def find(self) -> None:
        """Ask every backend for its queues (unless asked less than FIND_EVERY s ago); add
        those not shown yet."""
        async with self._lock:
            if time.monotonic() - self._last < FIND_EVERY:
                return
            self._last = time.monotonic()
            for asked in self._asked:
                await self._find_on(asked)

    async def _find_on(self, asked: Source) -> None:
        try:
            names = await asked.call(lambda admin: admin.queues())
        except (SourceDown, ConfigError) as exc:
            if self.problems.get(asked.name) != str(exc):
                log.warning("%s: could not list the backend's queues: %s", asked.name, describe(exc))
            self.problems[asked.name] = str(exc)
            return
        self.problems.pop(asked.name, None)
        shown = {(s.transport, s.home, s.queue) for s in self._sources}
        for name in names:
            if (asked.transport, asked.home, name) not in shown:
                self._sources.append(self._make(asked, name))
                log.info("dashboard: found queue %s/%s", asked.transport, name)
