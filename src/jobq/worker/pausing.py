"""Pause and resume: what a consumer knows of its queue's pause, and how the commands say it.

The state lives on the server (``Admin.pause`` / ``resume``: a row on PostgreSQL, a message in
``<q>.paused`` on RabbitMQ). Every consumer asks ``Admin.paused`` about every second
(``PauseWatch``); the pool takes no new work while the answer is yes (jobq.worker.fetcher, ``_hold``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from jobq.core.errors import describe
from jobq.core.looks import Look
from jobq.core.port import PauseState

POLL = 1.0  # seconds between looks: a pause or resume reaches every consumer within about this
PROBE_TIMEOUT = 5.0  # a look that takes longer failed; the last answer stands

Probe = Callable[[], Awaitable[bool]]


class PauseWatch:
    """Whether the queue is paused, as ``probe`` (``Admin.paused``) last answered.

    A look that fails keeps the last answer (a consumer does not start or stop on a server
    hiccup) and is logged once until one succeeds again. Listeners hear every change.
    """

    def __init__(self, probe: Probe, *, interval: float = POLL,
                 logger: logging.Logger | None = None) -> None:
        self._look = Look(probe)
        self._interval = interval
        self._log = logger or logging.getLogger("jobq.pause")
        self._listeners: list[Callable[[bool], None]] = []
        self._failing = False
        self.paused = False

    def listen(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(paused)`` on every change (from the event loop; must not block)."""
        self._listeners.append(callback)

    async def check(self) -> bool:
        """Look once; return the state (the previous one if the look failed)."""
        try:
            paused = await self._look(PROBE_TIMEOUT)
        except Exception as exc:  # backend code: a failing look must never stop the consumer
            (self._log.debug if self._failing else self._log.warning)(
                "could not tell whether the queue is paused (%s); going on as %s", describe(exc),
                "paused" if self.paused else "not paused")
            self._failing = True
            return self.paused
        self._failing = False
        if paused != self.paused:
            self.paused = paused
            for callback in self._listeners:
                callback(paused)
        return paused

    async def run(self) -> None:
        """Look every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            await self.check()


def _moment(since: datetime | None, now: datetime | None = None) -> str:
    if since is None:
        return "since an unknown time"
    since = since.astimezone(UTC)
    seconds = max(0, round(((now or datetime.now(UTC)) - since).total_seconds()))
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (sec, "s")]
    while len(units) > 1 and units[0][0] == 0:
        units.pop(0)
    age = " ".join(f"{n}{unit}" for n, unit in units[:2])  # the two largest: "3m 12s", "2d 5h"
    return f"since {since.isoformat(timespec='seconds')} ({age} ago)"


def render_state(state: PauseState) -> str:
    """``jobq stats``' line about the pause."""
    return f"paused {_moment(state.since)}" if state.paused else "not paused"


def render_change(state: PauseState, *, verb: str, queue: str, transport: str) -> str:
    """What ``jobq pause`` / ``jobq resume`` print: what changed, or that nothing had to."""
    name = f"queue {queue!r} on {transport}"
    if verb == "pause":
        if not state.changed:
            return f"{name} is already paused {_moment(state.since)}: nothing changed"
        return (f"{name} paused: its consumers take no new job within about {POLL:g}s (jobs "
                "already running finish and are settled; the unstarted go back to the queue); "
                "`jobq resume` lets them go on")
    if not state.changed:
        return f"{name} is not paused: nothing changed"
    return (f"{name} resumed: it had been paused {_moment(state.since)}; its consumers take "
            f"jobs again within about {POLL:g}s")
