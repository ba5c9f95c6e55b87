"""The backstop ends a shutdown that overran its bound, with every stack logged, and nothing
else: disarmed, or not yet due, it leaves the process alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from jobq.config import load_settings
from jobq.wiring.backstop import closing_bound, shutdown_bound

SCRIPT = """
import asyncio, logging, sys, time
from jobq.wiring.backstop import Backstop

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

async def stuck_close():
    await asyncio.sleep(30)  # a close that never keeps its deadline

async def main(arm, leave_after):
    with Backstop(logging.getLogger("jobq")) as backstop:
        for seconds in arm:
            backstop.arm(seconds)
        await asyncio.wait_for(stuck_close(), leave_after) if leave_after else await stuck_close()

try:
    asyncio.run(main({arm}, {leave_after}))
except TimeoutError:
    time.sleep(0.6)  # disarmed: nothing fires now
    print("left in time", file=sys.stderr)
"""


def run(arm: list[float], leave_after: float | None) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT).format(
        arm=arm, leave_after=leave_after)], capture_output=True, text=True, timeout=20)
    return done.returncode, done.stderr, time.monotonic() - started


def test_an_overrun_logs_every_stack_and_exits_1() -> None:
    code, err, took = run([0.5], None)
    assert code == 1, err
    assert "shutdown still not over 0.5s after it began" in err
    assert "stuck_close" in err  # the task where it waited
    assert "jobq-backstop" in err  # and every thread
    assert took < 5


def test_a_later_arm_never_postpones_an_earlier_one_and_an_earlier_one_wins() -> None:
    code, err, took = run([0.5, 10.0], None)
    assert code == 1 and "not over 0.5s" in err and took < 5
    code, err, took = run([10.0, 0.5], None)
    assert code == 1 and "not over 0.5s" in err and took < 5


def test_a_shutdown_over_in_time_is_left_alone() -> None:
    code, err, _ = run([0.5], 0.2)
    assert code == 0, err
    assert "left in time" in err and "not over" not in err


@pytest.mark.parametrize(("transport", "deadline"), [
    ("postgres", 6),  # lease 12: a 6 s statement deadline
    ("rabbitmq", 10),  # publish_timeout
])
def test_the_bound_with_the_defaults(transport: str, deadline: float) -> None:
    settings = load_settings(f"configs/{transport}.yaml", {"consumer.processor": "noop"})
    # The receive in flight (a claim and its release), 30 s for the jobs, 10 s for an
    # interrupted thread, 10 s of releases, two calls in flight at close, 15 s of closes.
    calls = (deadline + 1) * 2
    assert shutdown_bound(settings) == calls + 30 + 10 + 10 + calls + 15
    assert closing_bound(settings) == calls + 15
    # An app's consumer: 10 s more for its failure and shutdown hooks (APP_HOOKS_BOUND).
    app = load_settings(f"configs/{transport}.yaml", {"consumer.app": "tests.tasks_app:app"})
    assert closing_bound(app) == calls + 15 + 10


def test_a_short_shutdown_timeout_shortens_the_releases_too() -> None:
    settings = load_settings("configs/postgres.yaml", {"consumer.shutdown_timeout": 2,
                                                       "postgres.lease": 4})
    assert shutdown_bound(settings) == 2 * (2 + 1) + 2 + 10 + 2 + 2 * (2 + 1) + 15
