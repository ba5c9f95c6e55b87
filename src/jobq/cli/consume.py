"""``consumer``: the worker pool (a pool per queue with ``consumer.queues``) run until a stop
signal (or drained with --once), its start-up abandoned cleanly if the signal comes first, its
summary logged (and written with --stats-json)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from jobq.api import wired
from jobq.cli.recycling import recycling
from jobq.config import Settings
from jobq.core.errors import describe
from jobq.core.port import Transport
from jobq.feeds.schedules import scheduling
from jobq.observability.metrics import Metrics
from jobq.observability.monitor import Monitor
from jobq.observability.stacks import stacks_on_signal
from jobq.observability.watchdog import LoopWatch, Running, watching
from jobq.wiring.backstop import Backstop, closing_bound, shutdown_bound
from jobq.wiring.container import (
    Container,
    app_serving,
    get_observers,
    get_schedules,
    get_ticks,
    get_transport,
    get_worker_pool,
    show_metrics,
)
from jobq.wiring.derived import loop_block_threshold, queue_settings
from jobq.wiring.startup import open_transport
from jobq.worker.pool import WorkerPool
from jobq.worker.routing import describe_handler, require_processor
from jobq.worker.stats import PoolStats

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

    A pool per queue with ``consumer.queues`` (each with its own share of concurrency and its
    own connections, as a process of its own would have), stopped together. SIGTERM/SIGINT
    are handled from the first moment: before the pools run (connecting, retrying an
    unreachable server) a signal abandons the start-up and exits 0. SIGUSR1 logs every task's
    and thread's stack. No processor configured: a config error (exit 2). ``backstop`` is
    armed at the first signal with ``shutdown_bound`` and when the pools stop with
    ``closing_bound``: past them the process logs its stacks and exits (backstop.py).
    """
    require_processor(settings.consumer)
    pools: list[WorkerPool] = []
    stopping: list[float] = []
    watched: list[Running] = []  # every pool's running jobs, for the loop's watchdog
    watch = LoopWatch(loop_block_threshold(settings), lambda: watched)
    work = asyncio.create_task(_consume(settings, stats_json, pools, stopping, backstop,
                                        (watched, watch)),
                               name="jobq-consume")

    def stop() -> None:
        stopping.append(time.monotonic())
        if backstop is not None:
            backstop.arm(shutdown_bound(settings))
        if pools:
            if len(stopping) == 1:
                log.info("stop signal: running jobs may finish within %gs; jobs taken but not "
                         "started are handed back", settings.consumer.shutdown_timeout)
            for pool in pools:
                pool.stop()
            return
        # Still starting (connecting, perhaps retrying an unreachable server): nothing was
        # received, so nothing needs handing back or flushing. Cancelling the start-up unwinds
        # it: the connecting stops, what was opened is closed (container.connect says how).
        work.cancel()

    with signals_to(stop), stacks_on_signal(log), watching(watch):
        try:
            return await work
        except asyncio.CancelledError:
            if not (stopping and work.cancelled()):
                raise  # cancelled from outside, not by a signal
    log.info("stopped during start-up")
    return 0


@dataclass
class _Queue:
    """One queue of the process: its settings, pool, transport and observers."""

    settings: Settings
    pool: WorkerPool
    transport: Transport
    metrics: Metrics
    monitor: Monitor
    stats: PoolStats | None = None


async def _consume(settings: Settings, stats_json: str | None, pools: list[WorkerPool],
                   stopping: list[float], backstop: Backstop | None,
                   loop_watch: tuple[list[Running], LoopWatch]) -> int:
    async with contextlib.AsyncExitStack() as stack:
        every = queue_settings(settings)
        containers = [await stack.enter_async_context(wired(s)) for s in every]
        # An app's start-up hooks run before a transport opens, its shutdown hooks once closed.
        await stack.enter_async_context(app_serving(containers[0]))
        queues = [await _start(container) for container in containers]
        for queue in queues[1:]:  # one server shows every queue's metrics
            show_metrics(containers[0], queue.metrics)
        _, server, _ = await get_observers(containers[0])  # serving from now on
        schedules = get_schedules(containers[0])
        ticks = await get_ticks(containers[0]) if schedules else None
        await _open_all(queues)
        pools += [queue.pool for queue in queues]
        watched, watch = loop_watch
        watched += [Running(q.settings.queue, q.pool.job_of, q.pool.running, q.metrics.registry)
                    for q in queues]
        for queue in queues:
            queue.metrics.loop_stalled = watch.stalled_for
        watch.start()  # from here on a block costs leases and heartbeats: watched
        if stopping:
            # A signal came during the start-up and its cancel did not end it (a library on
            # the way caught the CancelledError; seen once in 40 fault-suite runs: the
            # consumer then ran on, deaf to that SIGTERM): stop now, gracefully.
            for pool in pools:
                pool.stop()
        _ready(queues, server)
        try:
            async with scheduling(schedules, ticks, log), recycling(settings, pools, log):
                await _run(queues)
        finally:
            if backstop is not None:
                backstop.arm(closing_bound(settings))
            shutdown = round(time.monotonic() - stopping[0], 3) if stopping else None
            # Together, so that closing several queues takes as long as closing one (the
            # bound above), and one close that fails leaves none of the others open.
            await _all(_close(queue, shutdown) for queue in queues)
    failed = await _report(queues, stats_json, shutdown)
    if any(queue.pool.forced for queue in queues):
        return 130
    return 1 if settings.consumer.once and failed else 0


async def _start(container: Container) -> _Queue:
    """One queue's pool, transport and observers (its metrics served by the first queue's
    server, started once every queue's are there)."""
    settings: Settings = container.settings()
    pool = await get_worker_pool(container)
    transport = await get_transport(container)
    metrics, _, monitor = await get_observers(container, serving=False)
    await pool.look_at_pause()
    return _Queue(settings, pool, transport, metrics, monitor)


async def _open_all(queues: list[_Queue]) -> None:
    """Open every queue's transport (retrying an unreachable server); if one cannot be opened
    (or a stop signal cancels the start-up), those already open hand back what they took and
    close, so that nothing they took comes back as a crash's."""
    opened: list[_Queue] = []
    try:
        for queue in queues:
            await open_transport(queue.transport, queue.settings.connect, log)
            opened.append(queue)
    except BaseException:
        await _all(_abandon(queue.transport) for queue in opened)
        raise


async def _abandon(transport: Transport) -> None:
    await transport.quiesce()
    await transport.close()


async def _all(work: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run ``work`` together; the first error raised once all have ended (the others logged)."""
    errors = [r for r in await asyncio.gather(*work, return_exceptions=True)
              if isinstance(r, BaseException)]
    for error in errors[1:]:
        log.error("closing a queue failed too: %s", describe(error))
    if errors:
        raise errors[0]


def _ready(queues: list[_Queue], server: WSGIServer | None) -> None:
    """Ready and watched, each queue said so."""
    for queue in queues:
        queue.metrics.ready = True
        queue.monitor.start()
        s = queue.settings
        log.info("consuming queue %r on %s (concurrency %d, %s%s)", s.queue, s.transport,
                 s.consumer.concurrency, describe_handler(s.consumer),
                 f"; metrics on {s.metrics.host}:{server.server_port}" if server else "")


async def _run(queues: list[_Queue]) -> None:
    """Every pool until each ends; one that fails stops the others gracefully first."""
    runs = [asyncio.create_task(queue.pool.run(), name=f"jobq-pool-{queue.settings.queue}")
            for queue in queues]
    try:
        for queue, stats in zip(queues, await asyncio.gather(*runs), strict=True):
            queue.stats = stats
    except BaseException:
        for queue in queues:
            queue.pool.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        raise


async def _close(queue: _Queue, shutdown: float | None) -> None:
    queue.metrics.ready = False
    await queue.monitor.stop()
    await queue.transport.close()
    if shutdown is not None:
        queue.metrics.shutdown(shutdown)


def _counts(stats: PoolStats, shutdown: float | None) -> dict[str, object]:
    """What the summary says: ``ok`` as the queue has it (acks that were written), and apart
    the acks dropped because the job was no longer this consumer's (``not_written``)."""
    return {"ok": stats.ok - stats.not_written, "retried": stats.retried, "dead": stats.dead,
            "cancelled": stats.cancelled, "released": stats.released,
            "not_written": stats.not_written, "settle_failures": stats.settle_failures,
            "receive_failures": stats.receive_failures, "jobs_per_second": round(stats.rate(), 1),
            "seconds": round(time.monotonic() - stats.started_at, 3),
            "shutdown_seconds": shutdown}


async def _report(queues: list[_Queue], stats_json: str | None, shutdown: float | None) -> int:
    """The run's counts, logged (and written to ``stats_json``): the queues' together, and
    each queue's when there are several; the number of receives and settles that failed."""
    for queue in queues:  # closed: every ack flushed, or known dropped
        if queue.stats is not None:
            counters = queue.transport.health().counters
            queue.stats.not_written = min(queue.stats.ok, counters.get("acks_not_written", 0))
    ran = [(q.settings.queue, q.stats) for q in queues if q.stats is not None]
    total = PoolStats.combined([stats for _, stats in ran])
    summary = _counts(total, shutdown)
    log.info("stopped: %s", " ".join(f"{k}={v}" for k, v in summary.items()))
    if len(ran) > 1:
        summary["queues"] = each = {name: _counts(stats, shutdown) for name, stats in ran}
        for name, counts in each.items():
            log.info("stopped queue %r: %s", name, " ".join(f"{k}={v}" for k, v in counts.items()))
    if stats_json:
        await asyncio.to_thread(Path(stats_json).write_text, json.dumps(summary), encoding="utf-8")
    failed = total.receive_failures + total.settle_failures
    if failed:
        log.error("%d receive(s) and %d settle(s) failed during the run: the jobs they left "
                  "come back to a later run%s", total.receive_failures, total.settle_failures,
                  " (--once exits 1)" if queues and queues[0].settings.consumer.once else "")
    return failed
