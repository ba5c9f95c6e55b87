"""Transaction-mode claims: one round trip to begin and lock a job, and the sweep they walk.

A hand-written loop spends two round trips before the job runs: BEGIN, then the locking
SELECT. Here BEGIN, ``EXECUTE`` of the claim (``txn_claim``, prepared once per session under
a name derived from its text) and the job's SAVEPOINT travel as one simple-protocol query.
The claim's plan is prepared once, so the server parses nothing but that short line per job.

Two things could take the prepared statement away, and both are handled:

* psycopg deallocates every prepared statement of a connection after a ROLLBACK, if it has
  prepared any itself there. Job connections therefore run with psycopg's automatic
  preparing off (``prepare_threshold = None``), handler statements included.
* Behind a pooler that hands each transaction to any server connection (PgBouncer in
  transaction mode), a statement prepared in one transaction is missing in the next. After
  a few such misses the claim falls back to two round trips with nothing prepared.

The statement's name is a digest of its text, which names the schema: two consumers, of
different schemas or versions, that meet on one server connection cannot run each other's.

``Sweep`` keeps the cursor the claims move past, and ``Claim`` is a delivery's handle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import weakref
from collections import Counter
from typing import Any

import psycopg
from psycopg import errors

from jobq.sql import Queries

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Row = tuple[Any, ...]
PARAMS = ((b"%(queue)s", b"$1"), (b"%(cursor)s", b"$2"), (b"%(last)s", b"$3"))
MISSES = 3  # statements found missing before the claim stops relying on them


@dataclasses.dataclass(slots=True, eq=False)
class Claim:
    """A delivery's handle: the connection whose open transaction holds the job's row lock."""

    conn: Conn
    job_id: int
    attempt: int  # this attempt's number: the settled ones plus the starts counted since


class ClaimStatement:
    """Begins a transaction on a connection and claims the next job there."""

    def __init__(self, queries: Queries, logger: logging.Logger) -> None:
        self._log = logger
        self._begin = queries["txn_begin"].as_bytes(None)
        self._claim = queries["txn_claim"].as_bytes(None)
        self._savepoint = queries["txn_savepoint"].as_bytes(None)
        positional = self._claim
        for named, number in PARAMS:
            positional = positional.replace(named, number)
        name = b"jobq_claim_" + hashlib.sha256(positional).hexdigest()[:16].encode()
        self._prepare = b"PREPARE " + name + b" (text, bigint, bigint) AS " + positional
        self._execute = (self._begin + b"; EXECUTE " + name + b"(%(queue)s, %(cursor)s, %(last)s); "
                         + self._savepoint)
        self._prepared: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._misses = 0

    async def claim(self, conn: Conn, params: dict[str, Any]) -> Row | None:
        """BEGIN, lock and mark the next job (txn_claim), SAVEPOINT; None if there is none."""
        while self._misses < MISSES:
            if conn not in self._prepared:
                await self._prepare_on(conn)
            query = psycopg.AsyncClientCursor(conn)
            try:
                await query.execute(self._execute, params)
            except errors.InvalidSqlStatementName:
                await conn.rollback()
                self._prepared.discard(conn)
                self._misses += 1
                if self._misses == MISSES:
                    self._log.warning("the prepared claim keeps going missing (a pooler in "
                                      "transaction mode?): claiming in two round trips from now on")
                continue
            query.nextset()
            return await query.fetchone()
        await conn.execute(self._begin)
        cur = await conn.execute(self._claim, params)
        await conn.execute(self._savepoint)
        return await cur.fetchone()

    async def _prepare_on(self, conn: Conn) -> None:
        conn.prepare_threshold = None
        # Already there: the same name, so the same text, left by an earlier client session
        # of this server connection (behind a pooler).
        with contextlib.suppress(errors.DuplicatePreparedStatement):
            await conn.execute(self._prepare)
        self._prepared.add(conn)


class Sweep:
    """Where this consumer's sweep stands: its cursor, and the jobs it handed out lately.

    Claims run concurrently, each from the cursor as it was when it started. One that started
    before another claim's job failed and became due again can find that job once more: the
    ids handed out are remembered, as long as a claim still running could return them, so a
    job runs at most once per sweep, which is what makes a sweep end.
    """

    PRUNE_AT = 1024  # remembered ids before the ones no running claim can return are dropped

    def __init__(self, last: int, now: float) -> None:
        self.last = last  # the highest id this sweep may claim
        self.cursor = 0
        self.started_at = now
        self._handed: set[int] = set()
        self._scanning: Counter[int] = Counter()  # the cursors running claims started from

    def restart(self, now: float) -> None:
        """Begin a new sweep from the lowest id: the jobs of the last one may run again."""
        self.cursor = 0
        self.started_at = now
        self._handed.clear()

    def begin(self) -> int:
        """A claim starts: the cursor it claims past."""
        self._scanning[self.cursor] += 1
        return self.cursor

    def end(self, start: int, job_id: int | None) -> bool:
        """A claim from ``start`` returned ``job_id``: True if this sweep has not handed it out."""
        self._scanning[start] -= 1
        if not self._scanning[start]:
            del self._scanning[start]
        if job_id is None or job_id in self._handed:
            return False
        self._handed.add(job_id)
        self.cursor = max(self.cursor, job_id)
        if len(self._handed) > self.PRUNE_AT:
            floor = min(self._scanning, default=self.cursor)
            self._handed = {i for i in self._handed if i > floor}
        return True
