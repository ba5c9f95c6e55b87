"""Baseline: a bare psycopg batch-claim loop over jobq's own table, what a team writes by hand.

One connection; claim up to ``--batch`` rows with the same CTE jobq uses (``LIMIT n ... FOR
UPDATE SKIP LOCKED``), run them, ack the batch in one UPDATE, repeat. No pool, no retries, no
heartbeats, no rescue: the floor of per-job cost that jobq's lease mode is measured against.
The SQL lives here, not in jobq's queries.sql, on purpose: this is not jobq.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import psycopg
from psycopg import sql

from benchmarks.processors import Gate, Recorder

CLAIM = """
WITH picked AS (
    SELECT id FROM {jobs}
     WHERE queue = %(queue)s AND status = 'pending' AND run_at <= now()
     ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE {jobs} AS j
   SET status = 'running', attempts = j.attempts + 1, locked_until = now() + interval '60 s'
  FROM picked WHERE j.id = picked.id
RETURNING j.id, j.payload
"""
ACK = "UPDATE {jobs} SET status = 'done', finished_at = now(), locked_until = NULL WHERE id = ANY(%(ids)s)"


async def consume(args: argparse.Namespace) -> None:
    """Claim, run, ack, until the queue is empty (``--once``) or SIGTERM."""
    rec, start = Recorder(args.dir), Gate(args.gate)
    jobs = sql.Identifier(args.schema, "jobs")
    claim, ack = sql.SQL(CLAIM).format(jobs=jobs), sql.SQL(ACK).format(jobs=jobs)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    pause = args.sleep_ms / 1000.0

    async def work(payload: dict[str, object]) -> None:
        await asyncio.sleep(pause)
        rec.job(payload)

    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
        print(f"consuming queue {args.queue!r} (raw psycopg loop)", file=sys.stderr, flush=True)
        while not stop.is_set():
            cur = await conn.execute(claim, {"queue": args.queue, "limit": args.batch})
            rows = await cur.fetchall()
            if not rows:
                if args.once:
                    return
                await asyncio.sleep(args.poll)
                continue
            if not start.open:
                await start.wait()
            if pause:
                await asyncio.gather(*(work(payload) for _, payload in rows))
            else:
                for _, payload in rows:
                    rec.job(payload)
            await conn.execute(ack, {"ids": [row[0] for row in rows]})


def parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments both raw Postgres baselines take."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--dir", required=True, help="completion record directory")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="handler time (0: no-op)")
    p.add_argument("--poll", type=float, default=0.01, help="seconds between empty claims")
    p.add_argument("--once", action="store_true", help="exit when a claim finds nothing")
    p.add_argument("--gate", default="", help="hold jobs until this file exists")
    return p


def main() -> None:
    """``python -m benchmarks.baselines.pg_batch --dsn ... --schema ... --queue ... --dir ...``."""
    p = parser(__doc__)
    p.add_argument("--batch", type=int, default=100)
    asyncio.run(consume(p.parse_args()))


if __name__ == "__main__":
    main()
