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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
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
                 rediscover: float = 0.25,
                 find_waits: Callable[[], Mapping[str, int] | None] | None = None) -> None:
        self.consumers = Series()
        self.server = Series()
        self.host = Series()
        self.waits = Waits()
        self._find_waits = find_waits
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
        if self._find_waits is not None:
            try:
                waits = self._find_waits()
            except Exception as exc:  # a monitor query failing must not end the case
                self.errors.append(f"server wait lookup failed: {exc}")
                self._find_waits = None
            else:
                if waits is None:
                    self._find_waits = None  # this server cannot say
                else:
                    self.waits.add(now, waits)

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


@dataclass
class Waits:
    """Snapshots of what the server processes were doing (by wait class) over time."""

    times: list[float] = field(default_factory=list)
    counts: list[Mapping[str, int]] = field(default_factory=list)

    def add(self, at: float, counts: Mapping[str, int]) -> None:
        """One snapshot: how many processes were in each class at ``at``."""
        self.times.append(at)
        self.counts.append(counts)

    def mean(self, start: float, end: float) -> dict[str, float] | None:
        """Processes in each class on average over the snapshots in [start, end]; None if none."""
        lo, hi = bisect_left(self.times, start), bisect_right(self.times, end)
        if hi <= lo:
            return None
        total: dict[str, float] = {}
        for counts in self.counts[lo:hi]:
            for name, n in counts.items():
                total[name] = total.get(name, 0.0) + n
        return {name: round(n / (hi - lo), 2) for name, n in sorted(total.items())}


def _read(pids: Sequence[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        value = process_cpu(pid)
        if value is not None:
            out[pid] = value
    return out
