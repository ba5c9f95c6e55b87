"""Schedules in config: validated with errors naming the key, their ticks, and the loop."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from jobq.config import load_settings
from jobq.errors import ConfigError
from jobq.schedules import Schedule, parse_schedules, run_schedules
from tests.conftest import cli_env, run_cli


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


class Record:
    """Ticks as the backends keep them: the first sight starts the schedule, later ticks fire."""

    def __init__(self) -> None:
        self.last: dict[str, datetime] = {}
        self.fired: list[datetime] = []

    async def fire(self, schedule: Schedule, tick: datetime) -> bool:
        last = self.last.get(schedule.name)
        self.last[schedule.name] = max(tick, last or tick)
        if last is None or last >= tick:
            return False
        self.fired.append(tick)
        return True

    async def last_ticks(self, queue: str | None = None) -> dict[str, datetime]:
        return dict(self.last)

    async def close(self) -> None:
        pass


async def test_the_loop_fires_each_tick_once() -> None:
    (s,) = parse_schedules({"fast": {"every": 0.2, "kind": "k"}})
    record = Record()
    task = asyncio.create_task(run_schedules((s,), record, logging.getLogger("test")))
    await asyncio.sleep(1.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert 4 <= len(record.fired) <= 6 and len(set(record.fired)) == len(record.fired)
