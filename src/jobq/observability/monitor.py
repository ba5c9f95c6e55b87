"""A consumer's periodic duties: queue depth into the metrics, a summary log line, liveness.

Depth comes from the transport's admin (``Admin.depth()``), which every backend answers as a
``Depth``: counts by state (Postgres: pending/running/dead; RabbitMQ: ready/unacked/dead/retry)
and the age of the oldest pending job. One cheap query per interval, off the pool's hot path.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

from jobq.core.errors import describe
from jobq.core.looks import Look
from jobq.core.port import Depth
from jobq.observability.metrics import Metrics
from jobq.worker.pool import WorkerPool

DepthProbe = Callable[[], Awaitable[Depth]]
PROBE_TIMEOUT = 10.0  # a depth poll that takes longer is counted as failed


class Monitor:
    """Polls depth every ``depth_interval`` (when metrics are on), logs a summary every
    ``summary_interval`` (0: never). (The liveness behind /healthz is the watchdog's:
    observability/watchdog.py.)"""

    def __init__(self, pool: WorkerPool, *, metrics: Metrics | None, probe: DepthProbe | None,
                 depth_interval: float, summary_interval: float,
                 logger: logging.Logger | None = None) -> None:
        self._pool = pool
        self._metrics = metrics
        self._probe = probe
        self._look = None if probe is None else Look(probe)  # a stop never cuts a poll short
        self._depth_every = depth_interval if metrics is not None and probe is not None else math.inf
        self._summary_every = summary_interval or math.inf
        self._log = logger or logging.getLogger("jobq.monitor")
        self._failing = False
        self.last_depth: Depth | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def needed(self) -> bool:
        """False when there is nothing to do (no metrics and no summary)."""
        return self._metrics is not None or self._summary_every != math.inf

    def start(self) -> None:
        """Run in the background until ``stop``."""
        if self.needed:
            self._task = asyncio.create_task(self.run(), name="jobq-monitor")

    async def stop(self) -> None:
        """Cancel the background task and wait for it."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # a bug here must not turn a clean shutdown into a crash
                self._log.exception("monitor failed")
            self._task = None

    async def run(self) -> None:
        """Loop until cancelled."""
        tick = min(1.0, self._depth_every, self._summary_every)
        now = time.monotonic()
        next_depth, next_summary = now, now + self._summary_every
        last = (now, self._pool.stats.ok, self._pool.stats.retried, self._pool.stats.dead)
        while True:
            now = time.monotonic()
            if now >= next_depth:
                next_depth = now + self._depth_every
                await self.poll()
            if now >= next_summary:
                next_summary = now + self._summary_every
                if self._depth_every == math.inf and self._probe is not None:
                    await self.poll()  # no metrics: poll only for the summary line
                last = self.summary(last)
            await asyncio.sleep(tick)

    async def poll(self) -> None:
        """Ask the server for the depth once; record it, or count the failure."""
        if self._look is None:
            return
        try:
            data = await self._look(PROBE_TIMEOUT)
            if self._metrics is not None:
                self._metrics.depth(data)
        except Exception as exc:  # backend code: a failing poll must never stop the consumer
            if self._metrics is not None:
                self._metrics.depth_failed()
            log = self._log.debug if self._failing else self._log.warning
            log("depth poll failed (%s); will retry", describe(exc))
            self._failing = True
            return
        self._failing = False
        self.last_depth = data

    def summary(self, last: tuple[float, int, int, int]) -> tuple[float, int, int, int]:
        """Log rate, failures, in-flight and depth since ``last``; return the new mark."""
        stats = self._pool.stats
        now = time.monotonic()
        since, ok0, retried0, dead0 = last
        ok, retried, dead = stats.ok - ok0, stats.retried - retried0, stats.dead - dead0
        rate = (ok + retried + dead) / max(now - since, 1e-9)
        depth = dict(self.last_depth.depth) if self.last_depth else None
        oldest = self.last_depth.oldest_pending_seconds if self.last_depth else None
        shown = " ".join(f"{k}={v}" for k, v in depth.items()) if depth else "unknown"
        paused = self._pool.paused
        self._log.info(
            "summary: %.1f jobs/s over %.0fs (ok %d, retried %d, dead %d); in flight %d; "
            "depth %s; oldest pending %s%s", rate, now - since, ok, retried, dead,
            self._pool.in_flight, shown, "-" if oldest is None else f"{oldest:.1f}s",
            "; queue paused" if paused else "",
            extra={"event": "summary", "rate": round(rate, 1), "ok": ok, "retried": retried,
                   "dead": dead, "in_flight": self._pool.in_flight, "depth": depth,
                   "oldest_pending_seconds": oldest, "paused": paused})
        return now, stats.ok, stats.retried, stats.dead


def render_depth(data: Depth, *, transport: str, queue: str) -> str:
    """``jobq stats`` as a table: one row per state, then the age of the oldest pending job."""
    # None: the backend cannot count that state (shown as "-").
    depth = {state: "-" if n is None else f"{n:,}" for state, n in data.depth.items()}
    width = max([5, *(len(s) for s in depth)])
    number = max([4, *(len(n) for n in depth.values())])
    lines = [f"queue {queue!r} on {transport}", f"{'state':<{width}}  {'jobs':>{number}}"]
    lines += [f"{state:<{width}}  {count:>{number}}" for state, count in depth.items()]
    oldest = data.oldest_pending_seconds
    lines.append("oldest pending job: " + ("none waiting" if oldest is None else f"{oldest:.1f}s old"))
    return "\n".join(lines)
