"""``jobq move`` on PostgreSQL: a queue's jobs handed over in batches, or taken in.

Out: one transaction per batch: the jobs locked (move_pending / move_dead), the other
backend's ``send`` (the broker's confirms), then deleted (move_forget), COMMIT; a move killed
before its COMMIT leaves the batch here (and perhaps there too: moved twice). In: one INSERT
per batch that keeps each job's id where it is an integer (move_in), so a batch moved twice
goes in once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.feeds.move import MovedJob, MoveReport, Send
from jobq.transports.postgres.admin import pool_fetch, require_schema
from jobq.transports.postgres.connect import taken, translated
from jobq.transports.postgres.sql import Queries

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]
NEEDS = {"jobs": "SELECT,INSERT,UPDATE,DELETE"}  # the operator's role (docs/security.md)
MAX_ID = 2**63 - 1


class PostgresMoves:
    """Move jobs of one queue out of, or into, a jobq schema."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 logger: logging.Logger | None = None) -> None:
        self._pool = pool
        self._cfg = settings
        self._queue = queue
        self._q = Queries(settings.schema)
        self._table = sql.Identifier(settings.schema, "jobs").as_string(None)
        self._log = logger or logging.getLogger("jobq.move")

    async def open(self) -> None:
        """Check the schema and the grants."""
        await require_schema(pool_fetch(self._pool, self._q), self._cfg.schema, NEEDS, "jobq move")

    async def move_out(self, state: str, kind: str | None, batch: int, send: Send,
                       report: MoveReport) -> None:
        """Each batch: lock, ``send``, delete, commit; until none is left."""
        while True:
            with translated("postgres move"):
                async with taken(self._pool) as conn, conn.transaction():
                    cur = await conn.execute(self._q[f"move_{state}"], {
                        "queue": self._queue, "kind": kind, "limit": batch})
                    rows = await cur.fetchall()
                    if not rows:
                        return
                    await send([_moved(row, dead=state == "dead") for row in rows])
                    await conn.execute(self._q["move_forget"], {"ids": [row[0] for row in rows]})

    async def move_in(self, jobs: Sequence[MovedJob], report: MoveReport) -> None:
        """One INSERT for the batch; jobs already here under their ids are not inserted again."""
        ids = [int(j.id) if j.id.isdigit() and int(j.id) <= MAX_ID else None for j in jobs]
        report.renamed += sum(1 for i in ids if i is None)
        params = {
            "table": self._table, "queue": self._queue, "ids": ids,
            "kinds": [j.kind for j in jobs],
            "payloads": [json.dumps(dict(j.payload)) for j in jobs],
            "headers": [json.dumps(dict(j.headers)) for j in jobs],
            "statuses": ["dead" if j.dead else "pending" for j in jobs],
            "attempts": [j.attempts for j in jobs],
            "max_attempts": [max(1, j.max_attempts) for j in jobs],
            "run_ats": [j.run_at for j in jobs],
            "errors": [j.last_error for j in jobs],
            "finished": [(j.finished_at or datetime.now(UTC)) if j.dead else None for j in jobs],
            "priorities": [j.priority for j in jobs],
        }
        with translated("postgres move"):
            async with taken(self._pool) as conn, conn.transaction():
                cur = await conn.execute(self._q["move_in"], params)
                kept = {row[0] for row in await cur.fetchall()}
                skipped = [i for i in ids if i is not None and i not in kept]
                if not skipped:
                    return
                # Here already under that id: the same job moved twice (nothing to do), or,
                # once in billions, another job with the same number: that one gets a new id.
                cur = await conn.execute(self._q["move_existing"], {"ids": skipped})
                there = {row[0]: (row[1], json.loads(row[2])) for row in await cur.fetchall()}
                clash = [n for n, i in enumerate(ids) if i in there
                         and i not in kept and there[i] != (jobs[n].kind, dict(jobs[n].payload))]
                if clash:
                    report.renamed += len(clash)
                    again = {k: [v[n] for n in clash] if isinstance(v, list) else v
                             for k, v in params.items()}
                    again["ids"] = [None] * len(clash)
                    await conn.execute(self._q["move_in"], again)


def _moved(row: Sequence[Any], *, dead: bool) -> MovedJob:
    (job_id, kind, payload, headers, attempts, max_attempts, run_at, error, finished,
     priority) = row
    return MovedJob(id=str(job_id), kind=kind, payload=json.loads(payload),
                    headers=json.loads(headers), attempts=attempts, max_attempts=max_attempts,
                    run_at=None if dead else run_at, last_error=error, dead=dead,
                    finished_at=finished, priority=priority)
