"""Benchmark processors: each one leaves a per-process completion record the runner reads back.

The record is the benchmark's own evidence, independent of the transports' counters: one
fixed-size entry per completed (or dead-lettered) job, written into a shared memory map of a
file in the run's directory. Writing into a ``MAP_SHARED`` page is a memory copy, not a system
call, so the no-op processor stays cheap (~0.3 us a job, paid equally by jobq and by the
baselines), and the entries are in the kernel's page cache the moment they are written: a
consumer killed with SIGKILL keeps everything it recorded.

A start gate lines the consumers up: with ``gate=<path>`` no job completes before that file
exists, so several consumer processes (started one after another, importing and connecting
at their own pace) begin draining together once the runner has seen them all ready. After it
opens, the gate costs one attribute check per job.

A job is named by its payload's ``n`` (the producer numbers its jobs 0..count-1), so the
runner knows the enqueued set without asking the backend. ``sent_at`` (``producer --stamp``)
gives end-to-end latency against the same wall clock; the record processor also stamps when
the handler started and when the backend says the job was enqueued (``Job.enqueued_at``), so
the latency case can say where the milliseconds go (measure.stages).
"""

from __future__ import annotations

import asyncio
import mmap
import os
import random
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobq import Job, PermanentError, Retry

# n, finished, sent_at, started (the handler's start), enqueued (Job.enqueued_at), status: times
# in epoch seconds, 0 where unknown. The status comes last: 0 marks the map's unwritten tail.
ENTRY = struct.Struct("<qddddq")
DONE, DEAD = 1, 2
_GROW = 1 << 20  # bytes added to the map when it is full


class Recorder:
    """Append-only completion record of one process (``<dir>/<pid>-<rand>.rec``)."""

    def __init__(self, directory: str | Path) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / f"{os.getpid()}-{uuid.uuid4().hex[:6]}.rec"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, _GROW)  # sparse: costs no disk until written
        self._map = mmap.mmap(self._fd, _GROW)
        self._size = _GROW
        self._at = 0

    def add(self, n: int, sent_at: float, status: int = DONE, *, started: float = 0.0,
            enqueued: float = 0.0) -> None:
        """Record one outcome; the entry is durable against kill -9 once this returns."""
        at = self._at
        if at + ENTRY.size > self._size:
            self._size += _GROW
            self._map.resize(self._size)
        ENTRY.pack_into(self._map, at, n, time.time(), sent_at, started, enqueued, status)
        self._at = at + ENTRY.size

    def job(self, payload: Mapping[str, Any], status: int = DONE, *, started: float = 0.0,
            enqueued: float = 0.0) -> None:
        """Record a job by its payload (``n`` and, if stamped, ``sent_at``)."""
        self.add(payload["n"], payload.get("sent_at", 0.0), status, started=started,
                 enqueued=enqueued)


class Gate:
    """Holds jobs back until ``path`` exists (no path: always open)."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.open = not path
        self._opened: asyncio.Event | None = None

    async def wait(self) -> None:
        """Return once the gate file exists (one poller however many jobs wait)."""
        if self._opened is None:
            self._opened = asyncio.Event()
            self._poll()
        await self._opened.wait()
        self.open = True

    def _poll(self) -> None:
        assert self._opened is not None
        if os.path.exists(self.path):
            self._opened.set()
        else:
            asyncio.get_running_loop().call_later(0.002, self._poll)


@dataclass(frozen=True, slots=True)
class Entry:
    """One recorded outcome."""

    n: int
    finished: float
    sent_at: float
    status: int
    started: float = 0.0  # 0: not stamped (every processor but record, and the peers)
    enqueued: float = 0.0


def read_records(directory: str | Path) -> Iterator[Entry]:
    """Every entry recorded under ``directory``, file by file, in write order."""
    for file in sorted(Path(directory).glob("*.rec")):
        data = file.read_bytes()
        for n, finished, sent_at, started, enqueued, status in ENTRY.iter_unpack(
                data[: len(data) // ENTRY.size * ENTRY.size]):
            if status == 0:  # the zeroed tail of the map: nothing written past here
                break
            yield Entry(n, finished, sent_at, status, started, enqueued)


def record(dir: str, gate: str = "") -> Any:
    """No-op job that records its completion: measures the queue, not the work."""
    rec, start = Recorder(dir), Gate(gate)

    async def handle(job: Job) -> None:
        started = time.time()
        if not start.open:
            await start.wait()
            started = time.time()
        rec.job(job.payload, started=started,
                enqueued=job.enqueued_at.timestamp() if job.enqueued_at else 0.0)

    return handle


def sleep(dir: str, ms: float = 10.0, gate: str = "") -> Any:
    """I/O-bound job: waits ``ms`` milliseconds, then records."""
    rec, start = Recorder(dir), Gate(gate)
    seconds = ms / 1000.0

    async def handle(job: Job) -> None:
        if not start.open:
            await start.wait()
        await asyncio.sleep(seconds)
        rec.job(job.payload)

    return handle


def flaky(dir: str, retry_rate: float = 0.05, fail_rate: float = 0.01, delay: float = 0.2,
          gate: str = "") -> Any:
    """Fails ``retry_rate`` of attempts retryably and ``fail_rate`` of them permanently.

    A job about to be dead-lettered (permanent failure, or a retryable one on its last
    attempt) is recorded as dead before the error is raised.
    """
    rec, start = Recorder(dir), Gate(gate)
    rand = random.Random()

    async def handle(job: Job) -> None:
        if not start.open:
            await start.wait()
        draw = rand.random()
        if draw < fail_rate:
            rec.job(job.payload, DEAD)
            raise PermanentError("benchmark: permanent failure on purpose")
        if draw < fail_rate + retry_rate:
            if job.last_attempt:
                rec.job(job.payload, DEAD)
            raise Retry(delay=delay, reason="benchmark: retryable failure on purpose")
        rec.job(job.payload)

    return handle
