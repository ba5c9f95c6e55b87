"""Schedules in config: validated with errors naming the key, their ticks, and the loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from jobq.config import load_settings
from jobq.core.errors import ConfigError
from jobq.feeds.schedules import Fired, Schedule, parse_schedules, run_schedules
from tests.conftest import cli_env, run_cli, until


@pytest.mark.parametrize(("entry", "key", "words"), [
    ({"cron": "61 * * * *", "kind": "k"}, "schedules.s.cron", "not a valid cron expression"),
    ({"cron": "0 3 * *", "kind": "k"}, "schedules.s.cron", "not a valid cron expression"),
    ({"every": "soon", "kind": "k"}, "schedules.s.every", "a duration like"),
    ({"every": "30s"}, "schedules.s.kind", "kind"),
    ({"kind": "k"}, "schedules.s", "one of cron"),
    ({"cron": "* * * * *", "every": "1m", "kind": "k"}, "schedules.s", "one of cron"),
    ({"cron": "* * * * *", "kind": "k", "timezone": "Mars/Olympus"}, "schedules.s.timezone",
     "unknown time zone"),
    ({"every": "1m", "kind": "k", "payload": [1]}, "schedules.s.payload", "mapping"),
    ({"every": "1m", "kind": "k", "whenever": 1}, "schedules.s", "unknown key"),
    ({"cron": None, "kind": "k"}, "schedules.s", "one of cron"),  # `cron: ~` in YAML
    ({"every": "0.2s", "kind": "k"}, "schedules.s.every", "at least 1s"),
    ({"every": "1m", "kind": "k", "timezone": "Europe/Lisbon"}, "schedules.s.timezone",
     "use cron for local times"),
    ({"every": "1m", "kind": "k", "queue": "no spaces"}, "schedules.s.queue", "not a queue name"),
    ({"every": "1m", "kind": "k", "payload": {"on": datetime(2027, 1, 1, tzinfo=UTC)}},
     "schedules.s.payload", "not JSON-serialisable"),
])
def test_a_bad_schedule_is_a_config_error_naming_it(entry: dict[str, object], key: str,
                                                    words: str) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        load_settings(None, {"schedules": {"s": entry}})
    assert caught.value.key == key


def test_jobq_schedules_exits_2_naming_the_schedule(tmp_path: object) -> None:
    result = run_cli("jobq", "schedules", env=cli_env(JOBQ_SCHEDULES__NIGHTLY__CRON="0 25 * * *",
                                                      JOBQ_SCHEDULES__NIGHTLY__KIND="report"))
    assert result.returncode == 2, result.stderr
    assert "schedules.nightly.cron" in result.stderr


def test_interval_ticks_are_whole_multiples_every_process_agrees_on() -> None:
    (s,) = parse_schedules({"hb": {"every": "30s", "kind": "ping"}})
    now = datetime(2026, 12, 1, 10, 0, 47, 500000, tzinfo=UTC)
    assert s.latest(now) == datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)
    assert s.following(s.latest(now)) == datetime(2026, 12, 1, 10, 1, tzinfo=UTC)


def test_cron_ticks_follow_the_time_zone_across_dst() -> None:
    (s,) = parse_schedules({"r": {"cron": "0 3 * * *", "kind": "report",
                                  "timezone": "Europe/Lisbon"}})
    # Lisbon is UTC+0 in winter, UTC+1 in summer (from 29 March 2026).
    winter = s.latest(datetime(2026, 3, 28, 12, tzinfo=UTC))
    summer = s.following(datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert winter == datetime(2026, 3, 28, 3, tzinfo=UTC)
    assert summer == datetime(2026, 3, 29, 2, tzinfo=UTC)
    assert s.latest(datetime(2026, 3, 28, 3, tzinfo=UTC)) == winter  # a tick is its own latest


def test_cron_ticks_in_the_hour_a_dst_change_repeats() -> None:
    # Before: the second added to the local time reset `fold`, so in the repeated hour (Lisbon,
    # 26 October 2025, 01:00-02:00 local twice) latest() answered an hour back and every tick
    # of that hour was skipped.
    (s,) = parse_schedules({"f": {"cron": "*/5 * * * *", "kind": "k",
                                  "timezone": "Europe/Lisbon"}})
    now = datetime(2025, 10, 26, 1, 22, tzinfo=UTC)  # 01:22 local, the second time
    assert s.latest(now) == datetime(2025, 10, 26, 1, 20, tzinfo=UTC)
    assert s.following(s.latest(now)) == datetime(2025, 10, 26, 1, 25, tzinfo=UTC)


class Record:
    """Ticks as the backends keep them: the first sight starts the schedule, later ticks fire.

    ``busy``: answers BUSY that many times first; ``broken``: raises that many times first.
    """

    def __init__(self, busy: int = 0, broken: int = 0) -> None:
        self.last: dict[str, datetime] = {}
        self.fired: list[datetime] = []
        self.calls = 0
        self.busy, self.broken = busy, broken

    async def fire(self, schedule: Schedule, tick: datetime) -> Fired:
        self.calls += 1
        if self.broken:
            self.broken -= 1
            raise TypeError("a bug in a backend")
        if self.busy:
            self.busy -= 1
            return Fired.BUSY
        last = self.last.get(schedule.name)
        self.last[schedule.name] = max(tick, last or tick)
        if last is None or last >= tick:
            return Fired.BEFORE
        self.fired.append(tick)
        return Fired.NOW

    async def open(self) -> None:
        pass

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        return dict(self.last)

    async def close(self) -> None:
        pass


FAST = Schedule(name="fast", kind="k", every=0.2)  # shorter than config allows: a quick test
HOURLY = Schedule(name="hourly", kind="k", every=3600)  # a tick left is not asked again in a test


async def run_until(record: Record, done: Callable[[], object], what: str,
                    schedule: Schedule = FAST) -> None:
    """Run the loop (a look every 0.05 s) until ``done()``: waited for with a deadline, not
    slept for, since a loaded machine looks and fires fewer times in a given time."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_schedules((schedule,), record, logging.getLogger("test"),
                                             stop, look=0.05))
    await until(done, what, 10)
    stop.set()
    await asyncio.wait_for(task, 2)  # stops when asked, without a cancel


async def test_the_loop_asks_once_per_tick() -> None:
    record = Record()
    await run_until(record, lambda: len(record.fired) >= 4, "four ticks fired")
    # Four looks or so a tick, and one call a tick (after the first sight): each tick asked
    # for once, then remembered.
    assert record.calls == len(record.fired) + 1


async def test_a_busy_answer_is_asked_again_not_taken_as_fired() -> None:
    # Before: any answer but "enqueued now" was remembered as done for the tick, so when the
    # process holding the schedule died before committing, no one fired that tick. Hourly:
    # taken as done, the tick would not be asked for again within the deadline.
    record = Record(busy=3)
    await run_until(record, lambda: record.last, "the tick asked again after each busy answer",
                    HOURLY)
    assert record.calls == 4  # three busy answers, then the first sight


async def test_a_fire_that_raises_anything_is_logged_and_tried_again(
        caplog: pytest.LogCaptureFixture) -> None:
    # Before: a TypeError ended the loop silently and every schedule stopped.
    record = Record(broken=2)
    with caplog.at_level(logging.INFO, "test"):
        # Hourly: a failed tick left for the next one would not be tried again in time.
        await run_until(record, lambda: record.last, "the tick tried again after the failures",
                        HOURLY)
    assert record.calls == 3
    assert "tick" in caplog.text and "TypeError" in caplog.text
    assert "working again" in caplog.text
