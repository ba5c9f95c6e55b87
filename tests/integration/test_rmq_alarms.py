"""RabbitMQ resource alarms: a memory alarm and a disk alarm while a consumer retries jobs, each
ended by SIGTERM within the stated bound, with nothing lost.

An alarm blocks every publishing connection of the broker, so these tests are ``serial`` (run
alone, after the rest). Each alarm lasts a few seconds and is always lifted in a ``finally``,
to the values the broker had before (read from ``rabbitmqctl status``), and the test waits until
the broker reports no alarm before it returns.
"""

from __future__ import annotations

import collections
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import command, need_tool, stop_cli, wait_until
from tests.contract.backends import Backend
from tests.processors import completions

pytestmark = pytest.mark.serial

RECORD = "tests.processors:record"
JOBS = 300
SHUTDOWN_TIMEOUT = 2.0
PUBLISH_TIMEOUT = 2.0
# docs/architecture.md, "Network faults, alarms and their bounds (RabbitMQ)": SIGTERM ends
# within shutdown_timeout + 2 x publish_timeout + 13 s; plus slack for a slow machine.
BOUND = SHUTDOWN_TIMEOUT + 2 * PUBLISH_TIMEOUT + 13 + 3
BLOCKED = "blocks publishing on the"
LIFT_WITHIN = 60.0  # s for the broker to report no alarm once the settings are restored


def rabbitmqctl(*args: str, tool: str = "rabbitmqctl", timeout: float = 30) -> str:
    result = subprocess.run([need_tool(tool, "rabbitmq-server"), *args], capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def alarms(timeout: float = 30) -> list[Any]:
    """The broker's alarms, as ``rabbitmq-diagnostics alarms`` reports them."""
    out: dict[str, Any] = json.loads(rabbitmqctl("-q", "alarms", "--formatter", "json",
                                                 tool="rabbitmq-diagnostics", timeout=timeout))
    # {"alarms": []} when there are none; {"local": [...], "global": [...]} when there are.
    return [*out.get("alarms", []), *out.get("local", []), *out.get("global", [])]


def watermarks() -> tuple[list[str], list[str]]:
    """The arguments that set the memory watermark and disk free limit back as they are now."""
    status = json.loads(rabbitmqctl("-q", "status", "--formatter", "json"))
    memory = status["vm_memory_high_watermark_setting"]
    if "relative" in memory:
        restore_memory = [f"{memory['relative']}"]
    else:
        restore_memory = ["absolute", f"{memory['absolute']}"]
    return restore_memory, [f"{int(status['disk_free_limit'])}"]


class Alarm:
    """Raises a memory or disk alarm; ``lift`` sets the broker back as it was before."""

    def __init__(self) -> None:
        assert not alarms(), "the broker already has an alarm: not adding one"
        self._memory, self._disk = watermarks()

    def set(self, kind: str) -> None:
        if kind == "memory":
            rabbitmqctl("set_vm_memory_high_watermark", "0.0001")
        else:
            rabbitmqctl("set_disk_free_limit", "1000000000000")  # 1 TB: above any free space
        assert wait_until(alarms, 10, step=0.2), f"no {kind} alarm after setting it"

    def lift(self) -> None:
        """Restore both settings (whatever was set) and wait until the broker has no alarm.

        One deadline for the wait, each look bounded by the time left: a look the CLI does not
        answer in time (an Erlang VM booting on a loaded machine, a node busy with the
        publishes the alarm held back) is no answer yet, not the end of the wait."""
        rabbitmqctl("set_vm_memory_high_watermark", *self._memory)
        rabbitmqctl("set_disk_free_limit", *self._disk)
        deadline = time.monotonic() + LIFT_WITHIN
        seen: object = "no answer"
        while time.monotonic() < deadline:
            try:
                seen = alarms(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                seen = "no answer"
                continue
            if not seen:
                return
            time.sleep(0.2)  # the pace of the looks, not a wait for the broker
        raise AssertionError(f"alarm still set after {LIFT_WITHIN:g}s: {seen}")


@pytest.fixture
def alarm() -> Iterator[Alarm]:
    """An Alarm, always lifted when the test ends (also when it failed)."""
    alarm = Alarm()
    try:
        yield alarm
    finally:
        alarm.lift()


def distinct(directory: Path) -> int:
    return len(set(completions(directory)))



def consumer(rabbit: Backend, directory: Path, log: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(rabbit.env, JOBQ_CONSUMER__SHUTDOWN_TIMEOUT=str(SHUTDOWN_TIMEOUT),
               JOBQ_RABBITMQ__PUBLISH_TIMEOUT=str(PUBLISH_TIMEOUT))
    return subprocess.Popen(
        [command("consumer"), *rabbit.args(), "-p", RECORD, "-a", f"directory={directory}", *extra],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True, env=env)


def survives(kind: str, rabbit: Backend, alarm: Alarm, tmp_path: Path) -> None:
    """Under the alarm, SIGTERM ends the retrying consumer within the bound, exit 0."""
    rabbit.produce(JOBS)
    done, log = tmp_path / "done", tmp_path / "consumer.err"
    # fail_rate: retries, i.e. copies to the retry tier, the publishes an alarm blocks (never on
    # a job's last attempt, so every job is meant to end done).
    proc = consumer(rabbit, done, log, "-n", "4", "-a", "sleep_ms=40", "-a", "fail_rate=0.3")
    try:
        assert wait_until(lambda: distinct(done) >= 30, 30), log.read_text()[-3000:]
        alarm.set(kind)
        assert wait_until(lambda: BLOCKED in log.read_text(), 10), log.read_text()[-3000:]
        time.sleep(2)  # retries now wait for the blocked copies' connection
        during = distinct(done)
        elapsed = stop_cli(proc, BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        alarm.lift()
    text = log.read_text()
    print(f"{kind} alarm: {during} of {JOBS} done when SIGTERM came; stopped in {elapsed:.1f}s")
    assert proc.returncode == 0, text[-3000:]
    assert elapsed < BOUND, (elapsed, text[-3000:])


def finish(rabbit: Backend, tmp_path: Path) -> None:
    """With the alarm lifted: every job ends done (none dead, none left waiting)."""
    done, log = tmp_path / "done", tmp_path / "rescuer.err"
    rescuer = consumer(rabbit, done, log, "-n", "8")
    try:
        assert wait_until(lambda: distinct(done) == JOBS and rabbit.waiting() == 0, 60, step=0.5), \
            (distinct(done), log.read_text()[-3000:])
    finally:
        stop_cli(rescuer, BOUND)
    assert rescuer.returncode == 0, log.read_text()[-3000:]
    counts = collections.Counter(completions(done))
    assert len(counts) == JOBS
    assert rabbit.dead() == []


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_alarm_then_sigterm_ends_cleanly_and_loses_nothing(
        kind: str, rabbit: Backend, alarm: Alarm, tmp_path: Path) -> None:
    survives(kind, rabbit, alarm, tmp_path)
    finish(rabbit, tmp_path)
