"""Delays and run_at: checked once, turned into a wait, and planned as hops through the tiers."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobq.config import LimitsConfig, RabbitConfig
from jobq.core.due import due_problem, wait_of
from jobq.core.errors import MalformedJob
from jobq.core.limits import encode_new_job
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.topology import Topology
from tests.conftest import run_cli

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("job", "words"), [
    (NewJob(kind="k", delay=-1), "finite and >= 0"),
    (NewJob(kind="k", delay=math.nan), "finite and >= 0"),
    (NewJob(kind="k", delay="soon"), "number of seconds"),  # type: ignore[arg-type]
    (NewJob(kind="k", delay=True), "number of seconds"),
    (NewJob(kind="k", delay=400e6), "ten years"),
    (NewJob(kind="k", run_at=datetime(2027, 1, 1)), "timezone-aware"),
    (NewJob(kind="k", run_at="2027-01-01"), "must be a datetime"),  # type: ignore[arg-type]
    (NewJob(kind="k", delay=5, run_at=NOW), "not both"),
    (NewJob(kind="k", run_at=datetime(2200, 1, 1, tzinfo=UTC)), "more than ten years"),
])
def test_a_bad_delay_or_run_at_is_refused_before_anything_is_sent(job: NewJob, words: str) -> None:
    assert words in (due_problem(job) or "")
    with pytest.raises(MalformedJob, match=words):
        encode_new_job(job, LimitsConfig())


def test_the_wait_of_a_job() -> None:
    assert wait_of(NewJob(kind="k", delay=2.5), NOW) == 2.5
    assert wait_of(NewJob(kind="k", run_at=NOW + timedelta(minutes=1)), NOW) == 60.0
    assert wait_of(NewJob(kind="k", run_at=NOW - timedelta(days=1)), NOW) == 0.0  # past: now
    elsewhere = NOW.astimezone(timezone(timedelta(hours=-5))) + timedelta(seconds=9)
    assert wait_of(NewJob(kind="k", run_at=elsewhere), NOW) == 9.0  # any offset


def plan(topology: Topology, wait: float) -> list[float]:
    """The tiers a job due in ``wait`` s hops through, as the consumer would forward it."""
    hops = []
    while (tier := topology.hop(wait)) is not None:
        seconds = float(tier.rsplit(".retry.", 1)[1])
        hops.append(seconds)
        wait -= seconds
    return hops


@pytest.mark.parametrize(("wait", "hops"), [
    (0.3, []), (2.0, [1, 1]), (4.99, [5]), (7.0, [5, 1, 1]), (31.0, [30, 1]),
    (3600.0, [3600]), (5400.0, [3600, 300, 300, 300, 300, 300, 300]),
])
def test_hops_add_up_to_the_delay(wait: float, hops: list[float]) -> None:
    assert plan(Topology.configured(RabbitConfig(), "q"), wait) == hops


def test_thirty_days_hop_through_the_day_tier_and_end_within_slack_of_due() -> None:
    # Before: a delay beyond the longest tier (300 s) waited 300 s and ran, 30 days early.
    topology = Topology.configured(RabbitConfig(), "q")
    wait = 30 * 86400 + 1234.5
    hops = plan(topology, wait)
    assert hops[:30] == [86400] * 30 and len(hops) < 50
    left = wait - sum(hops)
    assert -0.25 <= left < 1.0  # under the shortest tier: held by the consumer until due


def test_the_producer_cli_refuses_bad_times_with_exit_2() -> None:
    for args, words in ((["--delay", "-3"], "finite and >= 0"), (["--delay", "soon"], "not a number"),
                        (["--run-at", "2027-01-01T10:00:00"], "timezone-aware"),
                        (["--run-at", "tomorrow"], "not an ISO 8601 time"),
                        (["--delay", "1", "--run-at", "2027-01-01T10:00:00Z"], "not allowed with")):
        result = run_cli("producer", "--count", "1", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert words in result.stderr, (args, result.stderr)


