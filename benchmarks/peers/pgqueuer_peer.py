"""Peer: pgqueuer on PostgreSQL (psycopg driver), in a schema of the case's own.

``install`` creates the schema and pgqueuer's tables in it (``Queries.install``); every
connection sets ``search_path`` to it. The consumer is a ``QueueManager`` with one entrypoint,
``bench``, with at most ``--concurrency`` jobs running (``max_concurrent_tasks``) taken in
batches of half that, up to 100 (pgqueuer refuses a cap below two batches). ``--once`` runs
pgqueuer's own drain mode (it exits once the queue is empty). The producer enqueues lists of
1,000 jobs (pgqueuer's batch insert), or open-loop at ``--rate``.

With a cap, jobs that sleep (the io case) run at tens per second here: measured, not taken
apart. A per-entrypoint ``concurrency_limit`` instead of the cap ran a drain at 12 jobs/s and
lost jobs to its drain mode's early exit. Without a cap (pgqueuer's default) it would run
every fetched job at once, which no other target is allowed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence

import psycopg
from pgqueuer.db import PsycopgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

from benchmarks.peers import common
from benchmarks.peers.common import create_schema, drop_schema, produce, schema_dsn
from benchmarks.processors import Gate, Recorder

BATCH = 100


async def connect(args: argparse.Namespace) -> psycopg.AsyncConnection[object]:
    """An autocommit connection whose search_path is the case's schema."""
    return await psycopg.AsyncConnection.connect(schema_dsn(args), autocommit=True)


async def install(args: argparse.Namespace) -> None:
    await create_schema(args)
    async with await connect(args) as conn:
        await Queries(PsycopgDriver(conn)).install()


async def producer(args: argparse.Namespace) -> None:
    async with await connect(args) as conn:
        queries = Queries(PsycopgDriver(conn))

        async def send(bodies: Sequence[bytes]) -> None:
            await queries.enqueue(["bench"] * len(bodies), list(bodies), [0] * len(bodies))

        await produce(args.count, args.rate, send)


async def consumer(args: argparse.Namespace) -> None:
    rec, gate = Recorder(args.dir), Gate(args.gate)
    seconds = args.sleep_ms / 1000
    async with await connect(args) as conn:
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("bench")
        async def bench(job: Job) -> None:
            if not gate.open:
                await gate.wait()
            if seconds:
                await asyncio.sleep(seconds)
            rec.job(json.loads(job.payload or b"{}"))

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
        print(f"consuming queue {args.schema!r} (pgqueuer)", file=sys.stderr, flush=True)
        batch = max(1, min(BATCH, args.concurrency // 2))  # pgqueuer wants a cap of 2 batches
        await qm.run(batch_size=batch, max_concurrent_tasks=max(args.concurrency, 2 * batch),
                     mode=QueueExecutionMode.drain if args.once else QueueExecutionMode.continuous)


def main() -> None:
    """``python -m benchmarks.peers.pgqueuer_peer install|drop|produce|consume ...``."""
    common.main(__doc__, {"install": install, "drop": drop_schema, "produce": producer,
                          "consume": consumer})


if __name__ == "__main__":
    main()
