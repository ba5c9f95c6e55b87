"""Peer: procrastinate on PostgreSQL (its psycopg connector), in a schema of the case's own.

``install`` creates the schema and applies procrastinate's schema in it; every connection sets
``search_path`` to it. The consumer is procrastinate's worker (``run_worker_async``) for one
task, ``bench``, with ``--concurrency`` jobs at once, LISTEN/NOTIFY on, and done jobs kept
(its default, ``delete_jobs="never"``); ``--once`` runs it with ``wait=False`` (it exits once
it has caught up). The producer defers batches of 1,000 (``batch_defer_async``), or open-loop
at ``--rate``. Jobs are the task's keyword arguments: ``n`` and, stamped, ``sent_at``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import procrastinate

from benchmarks.peers import common
from benchmarks.peers.common import create_schema, drop_schema, produce, schema_dsn
from benchmarks.processors import Gate, Recorder


def app_for(args: argparse.Namespace) -> procrastinate.App:
    """A procrastinate App whose connections use the case's schema."""
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=schema_dsn(args)))


async def install(args: argparse.Namespace) -> None:
    await create_schema(args)
    app = app_for(args)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def producer(args: argparse.Namespace) -> None:
    app = app_for(args)
    task = app.task(name="bench", queue=args.queue)(lambda **_: None)
    async with app.open_async():
        async def send(bodies: Sequence[bytes]) -> None:
            await task.batch_defer_async(*(json.loads(b) for b in bodies))

        await produce(args.count, args.rate, send)


async def consumer(args: argparse.Namespace) -> None:
    rec, gate = Recorder(args.dir), Gate(args.gate)
    seconds = args.sleep_ms / 1000
    app = app_for(args)

    @app.task(name="bench", queue=args.queue)
    async def bench(**job: Any) -> None:
        if not gate.open:
            await gate.wait()
        if seconds:
            await asyncio.sleep(seconds)
        rec.job(job)

    async with app.open_async():
        print(f"consuming queue {args.queue!r} (procrastinate)", file=sys.stderr, flush=True)
        await app.run_worker_async(queues=[args.queue], concurrency=args.concurrency,
                                   wait=not args.once, install_signal_handlers=True)


def main() -> None:
    """``python -m benchmarks.peers.procrastinate_peer install|drop|produce|consume ...``."""
    common.main(__doc__, {"install": install, "drop": drop_schema, "produce": producer,
                          "consume": consumer})


if __name__ == "__main__":
    main()
