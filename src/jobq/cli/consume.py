"""``consumer``: the worker pool run until a stop signal (or drained with --once), its start-up
abandoned cleanly if the signal comes first, its summary logged (and written with --stats-json)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from jobq.api import wired
from jobq.config import Settings
from jobq.feeds.schedules import scheduling
from jobq.observability.stacks import stacks_on_signal
from jobq.wiring.backstop import Backstop, closing_bound, shutdown_bound
from jobq.wiring.container import (
    app_serving,
    get_observers,
    get_schedules,
    get_ticks,
    get_transport,
    get_worker_pool,
)
from jobq.wiring.startup import open_transport
from jobq.worker.pool import WorkerPool
from jobq.worker.routing import describe_handler, require_processor

log = logging.getLogger("jobq")


@contextlib.contextmanager
def signals_to(stop: Callable[[], None]) -> Iterator[None]:
    """Route SIGTERM and SIGINT to ``stop`` while inside; restore the defaults after."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def consume(settings: Settings, *, stats_json: str | None = None,
                  backstop: Backstop | None = None) -> int:
    """Run the worker pool until stopped (or drained with --once); 130 after a forced stop.

    SIGTERM/SIGINT are handled from the first moment: before the pool runs (connecting,
    retrying an unreachable server) a signal abandons the start-up and exits 0. SIGUSR1 logs
    every task's and thread's stack. No processor configured: a config error (exit 2).
    ``backstop`` is armed at the first signal with ``shutdown_bound`` and when the pool stops
    with ``closing_bound``: past them the process logs its stacks and exits (backstop.py).
    """
    require_processor(settings.consumer)
    pools: list[WorkerPool] = []
    stopping: list[float] = []
    work = asyncio.create_task(_consume(settings, stats_json, pools, stopping, backstop),
                               name="jobq-consume")

    def stop() -> None:
        stopping.append(time.monotonic())
        if backstop is not None:
            backstop.arm(shutdown_bound(settings))
        if pools:
            if len(stopping) == 1:
                log.info("stop signal: running jobs may finish within %gs; jobs taken but not "
                         "started are handed back", settings.consumer.shutdown_timeout)
            pools[0].stop()
            return
        # Still starting (connecting, perhaps retrying an unreachable server): nothing was
        # received, so nothing needs handing back or flushing. Cancelling the start-up unwinds
        # it: the connecting stops, what was opened is closed (container.connect says how).
        work.cancel()

    with signals_to(stop), stacks_on_signal(log):
        try:
            return await work
        except asyncio.CancelledError:
            if not (stopping and work.cancelled()):
                raise  # cancelled from outside, not by a signal
    log.info("stopped during start-up")
    return 0


async def _consume(settings: Settings, stats_json: str | None, pools: list[WorkerPool],
                   stopping: list[float], backstop: Backstop | None) -> int:
    # An app's start-up hooks run before the transport opens, its shutdown hooks once closed.
    async with wired(settings) as container, app_serving(container):
        pool = await get_worker_pool(container)
        transport = await get_transport(container)
        metrics, server, monitor = await get_observers(container)
        schedules = get_schedules(container)
        ticks = await get_ticks(container) if schedules else None
        await pool.look_at_pause()
        await open_transport(transport, settings.connect, log)
        pools.append(pool)
        if stopping:
            # A signal came during the start-up and its cancel did not end it (a library on
            # the way caught the CancelledError; seen once in 40 fault-suite runs: the
            # consumer then ran on, deaf to that SIGTERM): stop now, gracefully.
            pool.stop()
        metrics.ready = True
        monitor.start()
        log.info("consuming queue %r on %s (concurrency %d, %s%s)", settings.queue, settings.transport,
                 settings.consumer.concurrency, describe_handler(settings.consumer),
                 f"; metrics on {settings.metrics.host}:{server.server_port}" if server else "")
        try:
            async with scheduling(schedules, ticks, log):
                stats = await pool.run()
        finally:
            if backstop is not None:
                backstop.arm(closing_bound(settings))
            metrics.ready = False
            await monitor.stop()
            await transport.close()
            shutdown = round(time.monotonic() - stopping[0], 3) if stopping else None
            if shutdown is not None:
                metrics.shutdown(shutdown)
        forced = pool.forced
    summary = {"ok": stats.ok, "retried": stats.retried, "dead": stats.dead,
               "cancelled": stats.cancelled, "released": stats.released,
               "settle_failures": stats.settle_failures,
               "jobs_per_second": round(stats.rate(), 1),
               "seconds": round(time.monotonic() - stats.started_at, 3),
               "shutdown_seconds": shutdown}
    log.info("stopped: %s", " ".join(f"{k}={v}" for k, v in summary.items()))
    if stats_json:
        await asyncio.to_thread(Path(stats_json).write_text, json.dumps(summary), encoding="utf-8")
    return 130 if forced else 0
