"""A watchdog for the event loop: a handler that blocks it is noticed, named and counted.

A synchronous call inside an ``async def`` handler (``time.sleep``, ``requests.get``, a long
computation) stops every other job, the heartbeats and the acks of the process. Nothing on
the loop can notice: it is the loop that is stuck. So a daemon thread looks at a beat the
loop stamps every ``BEAT`` seconds; once the beat is ``threshold`` seconds old it logs, from
the thread and while the loop is still blocked, the job whose handler holds the loop (the
running task's job), where it is (the loop thread's stack) and the jobs running beside it;
when the loop is free again it logs how long the block lasted and counts it in
``jobq_loop_blocks`` and ``jobq_loop_blocked_seconds`` (labelled with that job's queue).

What a block costs downstream, and what jobq does about it (docs/architecture.md, "A blocked
event loop"): deadlines wait it out (core/within.py), ``/healthz`` goes red before a lease or
a heartbeat can expire (``wiring/derived.loop_stale_after``), and a job whose lease or channel
was lost during the block is handed back, never started (``Delivery.lapsed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from jobq.core.job import Job

BEAT = 0.1  # the loop stamps its beat this often (a timer callback: no task, no await)
STACK_DEPTH = 12  # frames of the loop thread's stack logged, innermost last


@dataclass(frozen=True, slots=True)
class Running:
    """What a pool runs now, for the watchdog: ``job_of`` a task (a worker's), ``jobs``."""

    queue: str
    job_of: Callable[[asyncio.Task[object]], Job | None]
    jobs: Callable[[], Sequence[Job]]
    registry: CollectorRegistry | None = None  # where the block counters go (its metrics')


@dataclass(slots=True)
class Block:
    """One block of the loop: since when, by which job (None: not a job's handler)."""

    since: float
    job: Job | None
    queue: str
    where: str


class LoopWatch:
    """Watches the event loop it was started on from a daemon thread (``start``/``stop``)."""

    def __init__(self, threshold: float, pools: Callable[[], Sequence[Running]],
                 logger: logging.Logger | None = None) -> None:
        self._threshold = threshold
        self._pools = pools
        self._log = logger or logging.getLogger("jobq.watchdog")
        self._beat = time.monotonic()
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._counters: dict[int, tuple[Counter, Counter]] = {}
        self.block: Block | None = None  # the block going on now, if any
        self.blocks = 0  # blocks seen so far (tests, the stop summary)

    def start(self) -> None:
        """Beat on the running loop; watch it from a daemon thread."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stamp()
        self._thread = threading.Thread(target=self._watch, name="jobq-loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and watching (the thread ends within one look)."""
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()

    def stalled_for(self) -> float:
        """Seconds since the loop last beat (0 while it beats on time)."""
        gap = time.monotonic() - self._beat
        return gap if gap > 2 * BEAT else 0.0

    def _stamp(self) -> None:
        self._beat = time.monotonic()
        assert self._loop is not None
        if not self._stopped.is_set():
            self._timer = self._loop.call_later(BEAT, self._stamp)

    def _watch(self) -> None:
        look = min(BEAT, self._threshold / 4)
        while not self._stopped.wait(look):
            gap = time.monotonic() - self._beat
            if self.block is None and gap >= self._threshold:
                self.block = self._blocked(self._beat)
            elif self.block is not None and gap < self._threshold:
                self._freed(self.block)
                self.block = None

    def _blocked(self, since: float) -> Block:
        """The loop has not beaten for ``threshold``: name the job holding it, log, remember."""
        assert self._loop is not None
        task = asyncio.current_task(self._loop)  # a dict read: safe from this thread
        job, queue, running = None, "", []
        for pool in self._pools():
            if task is not None and job is None and (job := pool.job_of(task)) is not None:
                queue = pool.queue
            running += [f"{j.id} ({j.kind})" for j in pool.jobs()]
        frame = sys._current_frames().get(self._loop_thread)
        stack = traceback.format_stack(frame, limit=None)[-STACK_DEPTH:] if frame else []
        where = stack[-1].strip().splitlines()[0] if stack else "unknown"
        who = (f"job {job.id} ({job.kind}) blocks it" if job is not None else
               "no job's handler holds it (jobq's own code or a library)")
        self._log.warning(
            "event loop blocked for %.1fs so far: %s, at %s; a handler that blocks (a "
            "synchronous call in an async def) must be a plain def, which runs in a thread. "
            "Running: %s. Loop thread's stack:\n%s", time.monotonic() - since, who, where,
            ", ".join(running) or "nothing", "".join(stack).rstrip(),
            extra={"event": "loop_blocked", "job_id": None if job is None else job.id})
        return Block(since, job, queue, where)

    def _freed(self, block: Block) -> None:
        seconds = self._beat - block.since
        self.blocks += 1
        who = "" if block.job is None else f" by job {block.job.id} ({block.job.kind})"
        self._log.warning("event loop free again after %.1fs blocked%s", seconds, who,
                          extra={"event": "loop_freed", "seconds": round(seconds, 3),
                                 "job_id": None if block.job is None else block.job.id})
        counters = self._counters_for(block.queue)
        if counters is not None:
            counters[0].inc()
            counters[1].inc(seconds)

    def _counters_for(self, queue: str) -> tuple[Counter, Counter] | None:
        pools = list(self._pools())
        pool = next((p for p in pools if p.queue == queue), pools[0] if pools else None)
        if pool is None or pool.registry is None:
            return None
        key = id(pool.registry)
        if key not in self._counters:
            labels = ("queue",)
            self._counters[key] = (
                Counter("jobq_loop_blocks", "Times the event loop was blocked for longer than "
                        "the watchdog's threshold.", labels, registry=pool.registry),
                Counter("jobq_loop_blocked_seconds", "Seconds the event loop spent blocked "
                        "(blocks over the threshold).", labels, registry=pool.registry))
        blocks, seconds = self._counters[key]
        return blocks.labels(pool.queue), seconds.labels(pool.queue)


@contextlib.contextmanager
def watching(watch: LoopWatch) -> Iterator[LoopWatch]:
    """``watch`` stopped on the way out, however the block ends; the consumer starts it once
    its transports are open (``LoopWatch.start``): the start-up before that (importing the
    backend and the app, connecting) holds no lease and no job, and on a loaded machine its
    imports alone held the loop for over a second, a false alarm on every start."""
    try:
        yield watch
    finally:
        watch.stop()
