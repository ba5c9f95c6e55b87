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

``Sweep`` is what the claims walk, and ``Claim`` is a delivery's handle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import weakref
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors

from jobq.sql import Queries

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Row = tuple[Any, ...]
PARAMS = ((b"%(queue)s", b"$1"), (b"%(after_run_at)s", b"$2"), (b"%(after_id)s", b"$3"),
          (b"%(until)s", b"$4"))
FIRST = datetime.min.replace(tzinfo=UTC)  # before any run_at: a sweep's first cursor
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
        self._prepare = (b"PREPARE " + name + b" (text, timestamptz, bigint, timestamptz) AS "
                         + positional)
        self._execute = (self._begin + b"; EXECUTE " + name
                         + b"(%(queue)s, %(after_run_at)s, %(after_id)s, %(until)s); " + self._savepoint)
        self._prepared: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._misses = 0

    async def claim(self, conn: Conn, sweep: Sweep, queue: str) -> Row | None:
        """BEGIN, lock and mark the sweep's next job (txn_claim), SAVEPOINT; None if none."""
        while self._misses < MISSES:
            if conn not in self._prepared:
                await self._prepare_on(conn)
            query = psycopg.AsyncClientCursor(conn)
            try:
                await query.execute(self._execute, sweep.literals(queue))
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
        cur = await conn.execute(self._claim, sweep.params(queue))
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
    """One pass over the due jobs in (run_at, id) order, past a cursor.

    Claims run concurrently, each from the cursor as it was when it started; the cursor moves
    past every job handed out. With ``until`` (``--once``: the server's clock when the sweep
    began) a job that fails is due again only after that, so no claim of this sweep can find
    it again, however old its cursor, and the sweep ends. Without it (a consumer that runs
    on) each claim takes what is due by its own transaction's clock.
    """

    def __init__(self, until: datetime | None, now: float) -> None:
        self.until = until
        self.started_at = now  # the event loop's clock, to start the next one in time
        self.cursor: tuple[datetime, int] = (FIRST, 0)
        self._until_text: str | None = None

    def params(self, queue: str) -> dict[str, Any]:
        """The claim's parameters for the next job of this sweep."""
        run_at, job_id = self.cursor
        return {"queue": queue, "after_run_at": run_at, "after_id": job_id, "until": self.until}

    def literals(self, queue: str) -> dict[str, Any]:
        """The same, timestamps as ISO text: quoted into the EXECUTE line far faster than a
        datetime, and cast back by the prepared statement's parameter types."""
        run_at, job_id = self.cursor
        if self._until_text is None and self.until is not None:
            self._until_text = self.until.isoformat()
        return {"queue": queue, "after_run_at": run_at.isoformat(), "after_id": job_id,
                "until": self._until_text}

    def passed(self, row: Row) -> None:
        """A claim handed out the job of ``row`` (txn_claim's: run_at last, id first)."""
        self.cursor = max(self.cursor, (row[-1], int(row[0])))
