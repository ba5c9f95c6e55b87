"""Baseline: the classic one-at-a-time SKIP LOCKED loop, ``--workers`` connections, by hand.

Each worker has its own connection and repeats: BEGIN; lock the next due row (``ORDER BY
run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED``, the order of the pending-jobs index, so the
planner reads that index instead of walking the primary key through done rows); run the job;
mark it done; COMMIT. The job runs while its row is locked, as in jobq's transaction claim
mode, which is measured against it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import psycopg
from psycopg import sql

from benchmarks.baselines.pg_batch import parser
from benchmarks.processors import Gate, Recorder

NEXT = """
SELECT id, payload FROM {jobs}
 WHERE queue = %(queue)s AND status = 'pending' AND run_at <= now()
 ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
"""
DONE = "UPDATE {jobs} SET status = 'done', attempts = attempts + 1, finished_at = now() WHERE id = %(id)s"


async def worker(args: argparse.Namespace, rec: Recorder, start: Gate, stop: asyncio.Event) -> None:
    """One connection, one job per transaction, until the queue is empty or stopped."""
    jobs = sql.Identifier(args.schema, "jobs")
    take, done = sql.SQL(NEXT).format(jobs=jobs), sql.SQL(DONE).format(jobs=jobs)
    pause = args.sleep_ms / 1000.0
    async with await psycopg.AsyncConnection.connect(args.dsn) as conn:
        while not stop.is_set():
            async with conn.transaction():
                row = await (await conn.execute(take, {"queue": args.queue})).fetchone()
                if row is not None:
                    if not start.open:
                        await start.wait()
                    if pause:
                        await asyncio.sleep(pause)
                    rec.job(row[1])
                    await conn.execute(done, {"id": row[0]})
            if row is None:
                if args.once:
                    return
                await asyncio.sleep(args.poll)


async def consume(args: argparse.Namespace) -> None:
    """Run ``--workers`` workers until they are all done."""
    rec, start, stop = Recorder(args.dir), Gate(args.gate), asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"consuming queue {args.queue!r} (raw one-at-a-time loop)", file=sys.stderr, flush=True)
    await asyncio.gather(*(worker(args, rec, start, stop) for _ in range(args.workers)))


def main() -> None:
    """``python -m benchmarks.baselines.pg_one --dsn ... --schema ... --queue ... --dir ...``."""
    p = parser(__doc__)
    p.add_argument("--workers", type=int, default=8)
    asyncio.run(consume(p.parse_args()))


if __name__ == "__main__":
    main()
