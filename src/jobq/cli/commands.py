"""What each command does once its settings are loaded; every one returns an exit code."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import sys
import time
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from jobq.api import wired
from jobq.cli.consume import signals_to
from jobq.config import Settings
from jobq.core.attempts import render_error
from jobq.core.durations import format_duration
from jobq.core.errors import ConfigError
from jobq.core.port import Admin, Control, NewJob
from jobq.feeds.pacing import send_paced
from jobq.feeds.schedules import parse_schedules
from jobq.observability.monitor import render_depth
from jobq.wiring.container import (
    admin_of,
    get_admin,
    get_publisher,
    get_ticks,
)
from jobq.wiring.derived import backend_home, schema_sql, server_address
from jobq.wiring.feeding import moving, relaying
from jobq.worker.pausing import render_change, render_state

log = logging.getLogger("jobq")


async def relay(settings: Settings, args: argparse.Namespace) -> int:
    """``jobq relay``: the PostgreSQL queue's jobs to RabbitMQ until SIGTERM (or drained)."""
    async with wired(settings) as container, relaying(container, args.batch) as relay:
        stop = asyncio.Event()
        log.info("relaying queue %r from PostgreSQL to RabbitMQ (batches of %d%s)",
                 settings.queue, args.batch, ", until drained" if args.once else "")
        with signals_to(stop.set):
            stats = await relay.run(stop, once=args.once)
    log.info("relay stopped: relayed=%d refused=%d batches=%d failed_batches=%d "
             "jobs_per_second=%.1f", stats.relayed, stats.refused, stats.batches, stats.failures,
             stats.rate())
    return 0


async def move_jobs(settings: Settings, args: argparse.Namespace) -> int:
    """``jobq move``: the queue's pending or dead jobs from one backend to the other."""
    from jobq.feeds.move import move

    async with wired(settings) as container, moving(container, args.source) as (source, sink):
        log.info("moving the %s jobs%s of queue %r from %s to %s", args.state,
                 f" of kind {args.move_kind!r}" if args.move_kind else "", settings.queue,
                 args.source, args.target)
        report = await move(source, sink, state=args.state, kind=args.move_kind,
                            batch=args.batch)
    print(f"moved {report.moved} {args.state} jobs of queue {settings.queue!r} from "
          f"{args.source} to {args.target} in {report.batches} batches"
          + (f"; {report.renamed} got new ids (theirs were not integers, or taken)"
             if report.renamed else "")
          + (f"; {report.left} left in {args.source}: not jobs (the log says why)"
             if report.left else ""))
    return 0


async def dashboard(configs: list[Settings], *, host: str, port: int, read_only: bool,
                    metrics: list[str]) -> int:
    """``jobq dashboard``: serve the pages of every configured queue until SIGTERM or Ctrl-C."""
    import uvicorn

    from jobq.dashboard.app import build
    from jobq.dashboard.discovery import Discovery
    from jobq.dashboard.security import Guard
    from jobq.dashboard.sources import Source, Throughput, sampling

    def source(s: Settings) -> Source:
        return Source(name=f"{s.transport}/{s.queue}", transport=s.transport, queue=s.queue,
                      address=server_address(s), opener=functools.partial(admin_of, s),
                      home=backend_home(s))

    sources = [source(s) for s in configs]
    settings_of = {id(src): s for src, s in zip(sources, configs, strict=True)}
    # A queue found on a configured one's backend: that config, for the other queue.
    discovery = Discovery(sources, lambda asked, queue: source(
        dataclasses.replace(settings_of[id(asked)], queue=queue)))
    await discovery.find()
    first = configs[0].dashboard  # the token, the charts: the first config's dashboard section
    guard = Guard(first.token, read_only=read_only or any(c.dashboard.read_only for c in configs))
    urls = metrics or first.metrics
    hosts = [*first.allowed_hosts, *([] if host in ("0.0.0.0", "::", "") else [host])]
    app = build(sources, guard, throughput=bool(urls), hosts=hosts, discovery=discovery)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="off"))
    log.info("dashboard on http://%s:%d/ for %s%s", host, port,
             ", ".join(s.name for s in sources), " (read-only)" if guard.read_only else "")
    try:
        async with sampling(sources, first.sample_interval, Throughput(urls) if urls else None,
                            find=discovery.find):
            await server.serve()
    finally:
        for src in sources:
            await src.close()
    return 0


def _payload(index: int, size: int, sent_at: float | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"n": index, "pad": "x" * size} if size else {"n": index}
    if sent_at is not None:
        payload["sent_at"] = sent_at
    return payload


async def produce(settings: Settings, args: argparse.Namespace) -> int:
    """Enqueue ``args.count`` jobs: in batches as fast as confirmed, or open-loop at ``args.rate``."""

    def make(first: int, size: int) -> list[NewJob]:
        stamp = time.time() if args.stamp else None  # the moment these jobs are handed over
        return [NewJob(kind=args.kind, payload=_payload(first + i, args.payload_size, stamp),
                       max_attempts=args.max_attempts, delay=args.delay,
                       run_at=args.run_at, priority=args.priority) for i in range(size)]

    lag = ""
    async with wired(settings) as container:
        publisher = await get_publisher(container)
        await publisher.open()
        started = time.monotonic()
        sent = 0
        try:
            if args.rate > 0:
                paced = await send_paced(publisher.enqueue_many, make, count=args.count,
                                         rate=args.rate, max_batch=args.batch)
                sent = paced.sent
                lag = f", {paced.calls} sends, at most {paced.max_lag * 1000:.1f} ms late"
            while sent < args.count:
                size = min(args.batch, args.count - sent)
                await publisher.enqueue_many(make(sent, size))
                sent += size
        finally:
            await publisher.close()
    elapsed = time.monotonic() - started
    log.info("enqueued %d jobs in %.2fs (%.0f jobs/s%s)", sent, elapsed,
             sent / max(elapsed, 1e-9), lag)
    return 0


async def list_schedules(settings: Settings, as_json: bool) -> int:
    """``jobq schedules``: each schedule, what it enqueues, its last tick and its next run."""
    schedules = parse_schedules(settings.schedules, settings.source)
    if not schedules:
        print(f"no schedules in {settings.source} (schedules: in the config)")
        return 0
    async with wired(settings) as container:
        ticks = await get_ticks(container)
        try:
            last: dict[tuple[str, str], datetime] = {}
            for queue in {s.queue or settings.queue for s in schedules}:
                last.update({(queue, k): v for k, v in (await ticks.last_ticks(queue)).items()})
        finally:
            await ticks.close()
    now = datetime.now(UTC)
    rows = [{"name": s.name, "when": s.cron or f"every {s.every:g}s", "timezone": s.timezone,
             "kind": s.kind, "queue": s.queue or settings.queue,
             "last_tick": last.get((s.queue or settings.queue, s.name)),
             "next_run": s.following(s.latest(now))} for s in schedules]
    _print(rows, as_json)
    return 0


def prune_ages(settings: Settings, state: str | None, older_than: float | None
               ) -> dict[str, float]:
    """What ``jobq prune`` deletes: state -> age in seconds (``--older-than``, else the state's
    ``postgres.retention``); ConfigError, before anything connects, when that says nothing."""
    rabbit = settings.transport == "rabbitmq"
    if rabbit and state == "done":
        raise ConfigError("RabbitMQ keeps no done jobs (an acked message is gone): only dead "
                          "letters can be pruned (--state dead)", key="--state")
    states = [state] if state else ["dead"] if rabbit else ["done", "dead"]
    if older_than is not None:
        return dict.fromkeys(states, older_than)
    how = "say how old with --older-than D (30s, 15m, 12h, 1d, 14d or seconds)"
    if rabbit:
        raise ConfigError(f"RabbitMQ has no retention setting: {how}", key="--older-than")
    ages = {s: age for s in states if (age := settings.postgres.retention.of(s)) is not None}
    if not ages:
        unset = " nor ".join(f"postgres.retention.{s}" for s in states)
        raise ConfigError(f"neither --older-than nor {unset} is set: {how}", key="--older-than")
    return ages


async def _prune(admin: Control, settings: Settings, args: argparse.Namespace) -> None:
    for state, age in prune_ages(settings, args.state, args.older_than).items():
        pruned = await admin.prune(state, age)
        print(f"pruned {pruned} {state} jobs older than {format_duration(age)} "
              f"from queue {settings.queue!r}")


async def admin(settings: Settings, args: argparse.Namespace) -> int:
    """``jobq init|stats|pause|resume|jobs|dead|prune|schedules``."""
    if args.command == "schedules":
        return await list_schedules(settings, args.json)
    if args.command == "init" and args.print_sql:
        print(schema_sql(settings))
        return 0
    if args.command == "prune":
        prune_ages(settings, args.state, args.older_than)  # a config error before connecting
    async with wired(settings) as container:
        admin = await get_admin(container)
        if args.command == "prune":
            await _prune(admin, settings, args)
        elif args.command == "init":
            print(await admin.init())  # the migrations applied or the topology declared
        elif args.command == "stats":
            depth, paused = await admin.depth(), await admin.pause_state()
            if args.json:
                _print({"transport": settings.transport, "queue": settings.queue, **_fields(depth),
                        "paused": paused.paused,
                        "paused_since": paused.since.isoformat() if paused.since else None}, True)
            else:
                print(render_depth(depth, transport=settings.transport, queue=settings.queue))
                print(render_state(paused))
        elif args.command == "jobs":
            await _jobs(admin, args)
        elif args.command in ("pause", "resume"):
            change = await (admin.pause() if args.command == "pause" else admin.resume())
            print(render_change(change, verb=args.command, queue=settings.queue,
                                transport=settings.transport))
        elif args.action == "list":
            _print([_fields(row) for row in await admin.dead_list(args.limit)], args.json)
        else:
            which = None if args.all else args.ids
            act = admin.dead_requeue if args.action == "requeue" else admin.dead_purge
            done = await act(ids=which, kind=args.dead_kind)
            verb = "requeued" if args.action == "requeue" else "purged"
            print(f"{verb} {len(done)} dead jobs" + (f": {', '.join(map(str, done))}"
                                                     if len(done) <= 20 else ""))
    return 0


async def _jobs(admin: Admin, args: argparse.Namespace) -> None:
    if args.action == "show":
        _print(_fields(await admin.show_job(args.id)), args.json)
    elif args.action == "list":
        _print([_fields(row) for row in await admin.list_jobs(args.state, args.job_kind,
                                                               args.limit)], args.json)
    elif args.action == "cancel":
        print(await admin.cancel_job(args.id))
    else:
        print(await admin.retry_job(args.id))


def _fields(row: Any) -> dict[str, Any]:
    # Shallow, unlike dataclasses.asdict: a payload is shown as it is, never copied.
    shown = {f.name: getattr(row, f.name) for f in fields(row)}
    if "errors" in shown:
        shown["errors"] = [error.to_json() for error in shown["errors"]]
    return shown


def _text(value: Any) -> Any:
    """A value for a person: a payload or headers as JSON, as they were enqueued, not a repr."""
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, ensure_ascii=False)
    return value


def _print(data: Any, as_json: bool) -> None:
    if as_json:
        json.dump(data, sys.stdout, default=str, indent=2)
        print()
        return
    rows = data if isinstance(data, list) else [data]
    for row in rows:
        errors = row.get("errors", [])
        print("  ".join(f"{k}={len(v) if k == 'errors' else _text(v)}" for k, v in row.items()))
        if not isinstance(data, list):  # one job shown: each failed attempt's error in full
            for error in errors:
                print(render_error(error))
