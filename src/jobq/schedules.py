"""Periodic schedules: ``schedules:`` in config, their ticks, and the loop that fires them.

A schedule is a cron expression (parsed by cronsim, in its ``timezone``) or an interval
(``every: 30s``, ticks at whole multiples of it since the epoch, so every process computes
the same ones). The loop runs in every consumer; the backend's ``Ticks`` makes each tick
enqueue exactly once across processes and hosts (docs/architecture.md, "Schedules"):

- a tick is fired only if it is later than the schedule's last fired tick, kept by the
  backend; the check and the enqueue are one step there;
- after a time when nothing ran, only the latest missed tick is enqueued, once;
- a schedule seen for the first time starts with its next tick (none from before it existed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobq.durations import parse_duration
from jobq.errors import ConfigError, JobqError, describe
from jobq.limits import kind_problem
from jobq.transport import NewJob

LOOK = 1.0  # the loop looks at least this often (a tick is fired within about this much)
_KEYS = {"cron", "every", "kind", "payload", "timezone", "queue", "max_attempts"}


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """One ``schedules.<name>`` entry, validated."""

    name: str
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    queue: str | None = None  # None: the config's queue
    max_attempts: int | None = None

    def latest(self, now: datetime) -> datetime:
        """The latest tick at or before ``now`` (aware)."""
        if self.every is not None:
            epoch = now.timestamp()
            return datetime.fromtimestamp(math.floor(epoch / self.every) * self.every, UTC)
        assert self.cron is not None
        local = now.astimezone(ZoneInfo(self.timezone)).replace(microsecond=0) + timedelta(seconds=1)
        return next(CronSim(self.cron, local, reverse=True)).astimezone(UTC)

    def following(self, tick: datetime) -> datetime:
        """The first tick after ``tick``."""
        if self.every is not None:
            return tick + timedelta(seconds=self.every)
        assert self.cron is not None
        return next(CronSim(self.cron, tick.astimezone(ZoneInfo(self.timezone)))).astimezone(UTC)

    def job(self, tick: datetime) -> NewJob:
        """The job a tick enqueues: its schedule and tick in the headers (to tell duplicates)."""
        return NewJob(kind=self.kind, payload=dict(self.payload), max_attempts=self.max_attempts,
                      headers={"schedule": self.name, "tick": tick.isoformat()})


def parse_schedules(raw: Mapping[str, Any], source: str = "") -> tuple[Schedule, ...]:
    """``schedules:`` as Schedules; ConfigError naming ``schedules.<name>.<key>`` otherwise."""
    found = []
    for name, entry in raw.items():
        key = f"schedules.{name}"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"expected a mapping, got {type(entry).__name__}", key=key, source=source)
        unknown = set(entry) - _KEYS
        if unknown:
            raise ConfigError(f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_KEYS))})",
                              key=key, source=source)
        found.append(_schedule(str(name), entry, key, source))
    return tuple(found)


def _schedule(name: str, entry: Mapping[str, Any], key: str, source: str) -> Schedule:
    def bad(what: str, sub: str) -> ConfigError:
        return ConfigError(what, key=f"{key}.{sub}", source=source)

    if ("cron" in entry) == ("every" in entry):
        raise ConfigError("give one of cron (e.g. '0 3 * * *') or every (e.g. 30s)", key=key,
                          source=source)
    problem = kind_problem(entry.get("kind"))
    if problem:
        raise bad(problem, "kind")
    payload = entry.get("payload", {})
    if not isinstance(payload, Mapping):
        raise bad(f"expected a mapping, got {type(payload).__name__}", "payload")
    timezone = entry.get("timezone", "UTC")
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise bad(f"unknown time zone {timezone!r} (an IANA name, e.g. Europe/Lisbon)",
                  "timezone") from None
    every = None
    if "every" in entry:
        try:
            every = parse_duration(entry["every"])
        except ValueError as exc:
            raise bad(str(exc), "every") from None
    cron = entry.get("cron")
    if cron is not None:
        if not isinstance(cron, str):
            raise bad(f"expected a cron expression, got {type(cron).__name__}", "cron")
        try:
            CronSim(cron, datetime.now(UTC))
        except CronSimError as exc:
            raise bad(f"not a valid cron expression {cron!r}: {exc}", "cron") from None
    attempts = entry.get("max_attempts")
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise bad(f"expected an integer >= 1, got {attempts!r}", "max_attempts")
    return Schedule(name=name, kind=str(entry["kind"]), payload=dict(payload), cron=cron,
                    every=every, timezone=str(timezone), queue=entry.get("queue"),
                    max_attempts=attempts)


class Ticks(Protocol):
    """A backend's record of fired ticks: each tick enqueues its job exactly once."""

    async def fire(self, schedule: Schedule, tick: datetime) -> bool:
        """Enqueue ``schedule``'s job for ``tick`` unless a tick as late was fired; True if it was now.

        The first call for a schedule records ``tick`` as fired without enqueueing (a new
        schedule starts with its next tick).
        """

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        """The last tick each schedule of ``queue`` (default: the config's) fired, by name."""

    async def close(self) -> None:
        """Let go of what the record holds (a lock, a connection)."""


async def run_schedules(schedules: tuple[Schedule, ...], ticks: Ticks, log: logging.Logger) -> None:
    """Fire each schedule's latest tick as it comes, until cancelled; errors logged, retried."""
    fired: dict[str, datetime] = {}
    while True:
        now = datetime.now(UTC)
        for schedule in schedules:
            tick = schedule.latest(now)
            if fired.get(schedule.name) == tick:
                continue
            try:
                if await ticks.fire(schedule, tick):
                    log.info("schedule %s: enqueued its tick %s", schedule.name, tick.isoformat())
                fired[schedule.name] = tick
            except (JobqError, OSError) as exc:
                log.warning("schedule %s: tick %s not enqueued yet (%s); trying again",
                            schedule.name, tick.isoformat(), describe(exc))
        soonest = min((s.following(s.latest(now)) for s in schedules), default=now)
        wait = max(0.05, min(LOOK, (soonest - datetime.now(UTC)).total_seconds()))
        await asyncio.sleep(wait)


@contextlib.asynccontextmanager
async def scheduling(schedules: tuple[Schedule, ...], ticks: Ticks | None,
                     log: logging.Logger) -> Any:
    """Run the schedules in the background for the duration of the block."""
    if not schedules or ticks is None:
        yield
        return
    task = asyncio.create_task(run_schedules(schedules, ticks, log), name="jobq-schedules")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await ticks.close()
