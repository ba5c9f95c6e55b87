"""Baseline: the PostgreSQL ceiling, a batch loop over a table of two columns.

``<schema>.mini (id bigserial primary key, payload jsonb)``, nothing else: no queue, status,
attempts or lease columns, no partial indexes, no NOTIFY trigger. One connection; in one
transaction, lock up to ``--batch`` rows in id order (``FOR UPDATE SKIP LOCKED``), run them,
delete them, commit (synchronously, as the server says): at-least-once, as jobq, but nothing a
job queue keeps. What jobq's lease mode is measured against to say what its own table costs.

``produce`` fills the table (``--count`` jobs numbered 0..count-1, ``{"n": i}``, 10,000 per
statement); ``consume`` drains it. The SQL lives here, not in jobq's queries.sql: this is not
jobq.
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

TABLE = "CREATE TABLE IF NOT EXISTS {mini} (id bigserial PRIMARY KEY, payload jsonb NOT NULL)"
FILL = ("INSERT INTO {mini} (payload) SELECT jsonb_build_object('n', n) "
        "FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n ORDER BY n")
TAKE = "SELECT id, payload FROM {mini} ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
DONE = "DELETE FROM {mini} WHERE id = ANY(%(ids)s)"
FILL_BATCH = 10_000


def produce(args: argparse.Namespace) -> None:
    """Create the table and put ``--count`` jobs in it."""
    mini = sql.Identifier(args.schema, "mini")
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(TABLE).format(mini=mini))
        for first in range(0, args.count, FILL_BATCH):
            conn.execute(sql.SQL(FILL).format(mini=mini),
                         {"first": first, "last": min(first + FILL_BATCH, args.count) - 1})


async def consume(args: argparse.Namespace) -> None:
    """Take, run, delete a batch per transaction, until empty (``--once``) or SIGTERM."""
    rec, start = Recorder(args.dir), Gate(args.gate)
    mini = sql.Identifier(args.schema, "mini")
    take, done = sql.SQL(TAKE).format(mini=mini), sql.SQL(DONE).format(mini=mini)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL(TABLE).format(mini=mini))
        print(f"consuming queue {args.queue!r} (minimal table loop)", file=sys.stderr, flush=True)
        while not stop.is_set():
            async with conn.transaction():
                rows = await (await conn.execute(take, {"limit": args.batch})).fetchall()
                if rows:
                    if not start.open:
                        await start.wait()
                    for _, payload in rows:
                        rec.job(payload)
                    await conn.execute(done, {"ids": [row[0] for row in rows]})
            if not rows:
                if args.once:
                    return
                await asyncio.sleep(args.poll)


def main() -> None:
    """``python -m benchmarks.baselines.pg_min produce|consume --dsn ... --schema ... ...``."""
    p = parser(__doc__)
    p.add_argument("command", choices=("produce", "consume"))
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--count", type=int, default=0, help="produce: how many jobs")
    p.add_argument("--rate", type=float, default=0.0, help="produce: only 0 (all at once)")
    args = p.parse_args()
    if args.command == "produce":
        if args.rate:
            sys.exit("pg_min produces all its jobs at once: it runs the drain only")
        produce(args)
    else:
        asyncio.run(consume(args))


if __name__ == "__main__":
    main()
