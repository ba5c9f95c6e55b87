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
import enum
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobq.core.durations import parse_duration
from jobq.core.errors import ConfigError, JobqError, describe
from jobq.core.limits import NAME_RE, LimitsConfig, encode_new_job, kind_problem
from jobq.core.port import NewJob

LOOK = 1.0  # the loop looks at least this often, and again this soon after a busy answer
EARLIEST = 0.005  # the loop never sleeps less (a timer that fires a hair early looks again)
SHORTEST = 1.0  # seconds: the shortest `every` (a tick is a job on the queue, not a timer)
STOP_GRACE = 5.0  # at stop, a fire under way gets this long to finish
_KEYS = {"cron", "every", "kind", "payload", "timezone", "queue", "max_attempts"}


class Fired(enum.Enum):
    """What a backend did with a tick."""

    NOW = "enqueued now"
    BEFORE = "fired before (or the schedule's first sight, which fires nothing)"
    BUSY = "not this process's to fire now (another fires it, or leads): look again"


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
        # The second is added in UTC: added to a local time it would reset `fold` and, in the
        # hour a DST change repeats, land an hour back (every tick of that hour skipped).
        after = (now.replace(microsecond=0) + timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        return next(CronSim(self.cron, after, reverse=True)).astimezone(UTC)

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


Bad = Callable[[str, str], ConfigError]  # (what is wrong, the sub-key) -> the error


def _schedule(name: str, entry: Mapping[str, Any], key: str, source: str) -> Schedule:
    def bad(what: str, sub: str) -> ConfigError:
        return ConfigError(what, key=f"{key}.{sub}", source=source)

    if (entry.get("cron") is None) == (entry.get("every") is None):
        raise ConfigError("give one of cron (e.g. '0 3 * * *') or every (e.g. 30s)", key=key,
                          source=source)
    problem = kind_problem(entry.get("kind"))
    if problem:
        raise bad(problem, "kind")
    payload = entry.get("payload", {})
    if not isinstance(payload, Mapping):
        raise bad(f"expected a mapping, got {type(payload).__name__}", "payload")
    attempts = entry.get("max_attempts")
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        raise bad(f"expected an integer >= 1, got {attempts!r}", "max_attempts")
    queue = entry.get("queue")
    if queue is not None and not (isinstance(queue, str) and NAME_RE.match(queue)):
        raise bad(f"not a queue name: {queue!r}", "queue")
    cron, every, timezone = _when(entry, bad)
    schedule = Schedule(name=name, kind=str(entry["kind"]), payload=dict(payload), cron=cron,
                        every=every, timezone=timezone, queue=queue, max_attempts=attempts)
    try:  # the job each tick enqueues, checked once here rather than failing at every tick
        encode_new_job(schedule.job(datetime.now(UTC)), LimitsConfig())
    except JobqError as exc:
        raise bad(str(exc), "payload") from None
    return schedule


def _when(entry: Mapping[str, Any], bad: Bad) -> tuple[str | None, float | None, str]:
    """The entry's cron expression or interval, and its time zone, checked."""
    timezone = entry.get("timezone", "UTC")
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise bad(f"unknown time zone {timezone!r} (an IANA name, e.g. Europe/Lisbon)",
                  "timezone") from None
    cron = entry.get("cron")
    if cron is not None:
        if not isinstance(cron, str):
            raise bad(f"expected a cron expression, got {type(cron).__name__}", "cron")
        try:
            CronSim(cron, datetime.now(UTC))
        except CronSimError as exc:
            raise bad(f"not a valid cron expression {cron!r}: {exc}", "cron") from None
        return cron, None, str(timezone)
    try:
        every = parse_duration(entry["every"])
    except ValueError as exc:
        raise bad(str(exc), "every") from None
    if every < SHORTEST:
        raise bad(f"at least {SHORTEST:g}s, got {entry['every']!r}", "every")
    if "timezone" in entry:
        raise bad("an `every` schedule ticks at multiples of its interval since the epoch, in no "
                  "time zone: use cron for local times", "timezone")
    return None, every, "UTC"


class Ticks(Protocol):
    """A backend's record of fired ticks: each tick enqueues its job exactly once."""

    async def fire(self, schedule: Schedule, tick: datetime) -> Fired:
        """Enqueue ``schedule``'s job for ``tick`` unless a tick as late was fired.

        The first call for a schedule records ``tick`` as fired without enqueueing (a new
        schedule starts with its next tick). BUSY when this process cannot tell or act now
        (another holds the schedule or the lead): the loop asks again a second later.
        """

    async def open(self) -> None:
        """Check what firing needs (tables, grants); ConfigError naming the fix if it is missing."""

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        """The last tick each schedule of ``queue`` (default: the config's) fired, by name."""

    async def close(self) -> None:
        """Let go of what the record holds (a lock, a connection)."""


async def run_schedules(schedules: tuple[Schedule, ...], ticks: Ticks, log: logging.Logger,
                        stop: asyncio.Event | None = None, look: float = LOOK) -> None:
    """Fire each schedule's latest tick as it comes, until ``stop`` is set; never raises.

    A tick answered BUSY is asked again at the next look: the process firing it may die
    before it commits, and the lead may change hands. Whatever a fire raises is logged (with
    its traceback, if it is not a backend error) and tried again at the next look.
    """
    stop = stop or asyncio.Event()
    done: dict[str, datetime] = {}  # the tick each schedule is known to be past
    failing: set[str] = set()
    while not stop.is_set():
        now = datetime.now(UTC)
        for schedule in schedules:
            tick = schedule.latest(now)
            if done.get(schedule.name) == tick or stop.is_set():
                continue
            try:
                fired = await ticks.fire(schedule, tick)
            except (JobqError, OSError, TimeoutError) as exc:
                fired = None
                if schedule.name not in failing:
                    log.warning("schedule %s: tick %s not enqueued yet (%s); trying again every "
                                "%gs", schedule.name, tick.isoformat(), describe(exc), look)
            except Exception:
                fired = None
                if schedule.name not in failing:
                    log.exception("schedule %s: tick %s failed; trying again every %gs",
                                  schedule.name, tick.isoformat(), look)
            if fired is None:
                failing.add(schedule.name)
                continue
            if schedule.name in failing:
                failing.discard(schedule.name)
                log.info("schedule %s: working again", schedule.name)
            if fired is Fired.NOW:
                log.info("schedule %s: enqueued its tick %s", schedule.name, tick.isoformat())
            if fired is not Fired.BUSY:
                done[schedule.name] = tick
        now = datetime.now(UTC)
        latest = {s.name: s.latest(now) for s in schedules}
        waiting = any(done.get(name) != tick for name, tick in latest.items())
        soonest = min((s.following(latest[s.name]) for s in schedules), default=now)
        wait = look if waiting else min(look, (soonest - now).total_seconds())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(EARLIEST, wait)):
                await stop.wait()


@contextlib.asynccontextmanager
async def scheduling(schedules: tuple[Schedule, ...], ticks: Ticks | None,
                     log: logging.Logger) -> Any:
    """Run the schedules in the background for the duration of the block.

    At the end the loop is asked to stop and a fire under way gets STOP_GRACE seconds to
    finish (a cancel in the middle of a broker call can close the channel it shares); only
    then is it cancelled.
    """
    if not schedules or ticks is None:
        yield
        return
    stop = asyncio.Event()
    task = asyncio.create_task(run_schedules(schedules, ticks, log, stop), name="jobq-schedules")
    try:
        yield
    finally:
        stop.set()
        done, _ = await asyncio.wait([task], timeout=STOP_GRACE)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_GRACE):
                await ticks.close()
