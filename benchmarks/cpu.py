"""CPU accounting from /proc: the consumers, the server processes and the whole host.

A sampler thread reads ``/proc/<pid>/stat`` (user + system time of every thread of a process)
every 20 ms and keeps a time series, so the runner can take the CPU used inside the window
where jobs were completing, leaving out process start-up. /proc counts in clock ticks
(10 ms), so figures are good to about a tick per process.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a live (or not yet reaped) process; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / TICK


def host_busy() -> float:
    """CPU seconds every core of the host has spent not idle since boot (/proc/stat)."""
    with open("/proc/stat", "rb") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / TICK


@dataclass
class Series:
    """Cumulative CPU seconds of a group of processes over time."""

    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    _last: dict[int, float] = field(default_factory=dict)

    def add(self, at: float, per_pid: dict[int, float]) -> None:
        """Record the group's total; a process that vanished keeps its last reading."""
        self._last.update(per_pid)
        self.times.append(at)
        self.values.append(sum(self._last.values()))

    def at(self, when: float) -> float:
        """The cumulative value at the last sample taken at or before ``when`` (0 before any)."""
        i = bisect_right(self.times, when)
        return self.values[i - 1] if i else 0.0

    def last(self) -> float:
        """The latest cumulative value."""
        return self.values[-1] if self.values else 0.0


class Sampler:
    """Samples consumers, server processes and the host until stopped (a daemon thread)."""

    def __init__(self, find_server: Callable[[], Sequence[int]], interval: float = 0.02,
                 rediscover: float = 0.25) -> None:
        self.consumers = Series()
        self.server = Series()
        self.host = Series()
        self._pids: list[int] = []
        self._server_pids: list[int] = []
        self._find_server = find_server
        self._interval = interval
        self._rediscover = rediscover
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)
        self.errors: list[str] = []

    def watch(self, pid: int) -> None:
        """Account one more consumer process."""
        self._pids = [*self._pids, pid]

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._sample()

    def _sample(self) -> None:
        now = time.time()
        self.consumers.add(now, _read(self._pids))
        self.server.add(now, _read(self._server_pids))
        self.host.add(now, {0: host_busy()})

    def _loop(self) -> None:
        next_lookup = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_lookup:
                try:
                    found = set(self._find_server())
                    self._server_pids = sorted(found | set(self._server_pids))
                except Exception as exc:  # a monitor query failing must not end the case
                    self.errors.append(f"server process lookup failed: {exc}")
                next_lookup = time.monotonic() + self._rediscover
            self._sample()
            self._stop.wait(self._interval)


def _read(pids: Sequence[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        value = process_cpu(pid)
        if value is not None:
            out[pid] = value
    return out
