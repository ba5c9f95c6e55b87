"""Baseline: the classic one-at-a-time SKIP LOCKED loop over jobq's table, written by hand.

``--workers`` connections, each looping: BEGIN; lock the next pending job (ORDER BY run_at, id
LIMIT 1 FOR UPDATE SKIP LOCKED); run the job (a no-op, or ``--sleep-ms``); mark it done;
COMMIT. No cursor, retries, attempt count or pool: the floor that jobq's transaction mode is
measured against, the same pattern with nothing else. The SQL lives here, not in jobq's
queries.sql, on purpose: this is not jobq. Prints one JSON line:
{"ok": n, "seconds": s, "jobs_per_second": r}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import psycopg
from psycopg import sql

# ORDER BY run_at, id: the order of jobq's jobs_pending_idx (queue, run_at, id). Ordered by id
# alone, the planner walks the primary key from the lowest id through every done job: a
# baseline that slows down as it drains would flatter whatever is compared with it.
CLAIM = """
SELECT id, payload FROM {jobs}
 WHERE queue = %(queue)s AND status = 'pending' AND run_at <= now()
 ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
"""
DONE = "UPDATE {jobs} SET status = 'done', finished_at = now() WHERE id = %(id)s"


async def worker(conn: psycopg.AsyncConnection[tuple[object, ...]], claim: sql.Composed,
                 done: sql.Composed, queue: str, pause: float = 0.0) -> int:
    """Run jobs (each sleeping ``pause`` s, its row locked) until a claim finds none; return how many."""
    count = 0
    while True:
        async with conn.transaction():
            cur = await conn.execute(claim, {"queue": queue})
            row = await cur.fetchone()
            if row is None:
                return count
            if pause:
                await asyncio.sleep(pause)
            await conn.execute(done, {"id": row[0]})
        count += 1


async def drain(args: argparse.Namespace) -> dict[str, float]:
    """Drain the queue with ``args.workers`` concurrent loops."""
    jobs = sql.Identifier(args.schema, "jobs")
    claim, done = sql.SQL(CLAIM).format(jobs=jobs), sql.SQL(DONE).format(jobs=jobs)
    conns = [await psycopg.AsyncConnection.connect(args.dsn) for _ in range(args.workers)]
    started = time.monotonic()  # like the consumer's own rate: from the first claim
    pause = args.sleep_ms / 1000.0
    counts = await asyncio.gather(*(worker(conn, claim, done, args.queue, pause) for conn in conns))
    seconds = time.monotonic() - started
    for conn in conns:
        await conn.close()
    return {"ok": sum(counts), "seconds": round(seconds, 3),
            "jobs_per_second": round(sum(counts) / seconds, 1)}


def main() -> None:
    """``python -m benchmarks.raw_txn --dsn ... --schema ... --queue ... --workers 16``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--sleep-ms", type=float, default=0.0, help="handler time (0: no-op)")
    print(json.dumps(asyncio.run(drain(p.parse_args()))))


if __name__ == "__main__":
    main()
