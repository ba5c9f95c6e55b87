"""Transaction-mode claims: a pick for the free workers, a take per job, and the sweep.

A claim is two steps. ``txn_pick`` picks jobs for the free workers (and, with
``postgres.pick_ahead``, for the next to free up) in a statement that commits at once, and
counts the starts of those that come back from a consumer that died holding them (STALE), so a
job that kills its process every time still uses up its attempts. Then each job is taken in a
transaction of its own: BEGIN, ``txn_take`` (which locks the row, marks it done and counts the
start of a job its pick did not, all uncommitted) and the job's SAVEPOINT travel as one
simple-protocol query that runs a statement prepared once per session under a name derived
from its text, so the server parses nothing but that short line per job. A take for the
worker an ack frees goes with that ack's COMMIT, on the same connection (``commit=True``).

Two things could take the prepared statements away, and both are handled:

* psycopg deallocates every prepared statement of a connection after a ROLLBACK, if it has
  prepared any itself there. Job connections therefore run with psycopg's automatic
  preparing off (``prepare_threshold = None``), handler statements included.
* Behind a pooler that hands each transaction to any server connection (PgBouncer in
  transaction mode), a statement prepared in one transaction is missing in the next. After
  a few such misses the claims fall back to plain statements, nothing prepared.

The statements' names are a digest of their text, which names the schema: two consumers, of
different schemas or versions, that meet on one server connection cannot run each other's.

``Sweep`` is what the picks walk, and ``Claim`` is a delivery's handle.
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
from psycopg import errors, sql
from psycopg.pq import TransactionStatus

from jobq.transports.postgres.sql import Queries

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)  # a transaction under way
Row = tuple[Any, ...]
PICK = ((b"%(queue)s", b"$1"), (b"%(after_run_at)s", b"$2"), (b"%(after_id)s", b"$3"),
        (b"%(until)s", b"$4"), (b"%(limit)s", b"$5"), (b"%(grace)s", b"$6"), (b"%(worker)s", b"$7"))
TAKE = ((b"%(id)s", b"$1"), (b"%(worker)s", b"$2"), (b"%(until)s", b"$3"), (b"%(count)s", b"$4"))
# Seconds a picked job is passed over by other picks, waiting for its take (one round trip
# later): a take later than that (an event loop blocked as long) may find it picked again.
GRACE = 2.0
PICKED = 7  # txn_pick's row: the job's locked_until as the pick set it (the take's token)
STALE = 8  # txn_pick's row: the job came back from a consumer that died; the pick counted it
LOST = 9  # txn_pick's row: a run of the job was lost with its consumer, now or before
FIRST = datetime.min.replace(tzinfo=UTC)  # before any run_at: a sweep's first cursor
MISSES = 3  # statements found missing before the claim stops relying on them


class TakeFailedAfterCommit(Exception):
    """A take with a COMMIT: the COMMIT went through, the take after it failed."""


@dataclasses.dataclass(slots=True, eq=False)
class Claim:
    """A delivery's handle: the connection whose open transaction holds the job's row lock."""

    conn: Conn
    job_id: int
    attempt: int  # this attempt's number: the row's attempts once the start is counted
    count: int  # 1 where the take counts the start (in the job's transaction), 0 where the pick did
    until: datetime  # the pick's token (locked_until), which the row keeps until the job settles
    ended: tuple[str, ...] = ()  # once the transaction ended without jobq: states the row may be in
    let_go: bool = False  # its connection given back to the pool, or on to the next job


class ClaimStatement:
    """Picks jobs for the free workers, and takes each in a transaction of its own."""

    def __init__(self, queries: Queries, logger: logging.Logger, worker: str) -> None:
        self._log = logger
        self._worker = worker
        self._begin = queries["txn_begin"].as_bytes(None)
        self._pick = queries["txn_pick"].as_bytes(None)
        self._take = queries["txn_take"].as_bytes(None)
        self._savepoint = queries["txn_savepoint"].as_bytes(None)
        self._commit = queries["txn_commit"].as_bytes(None) + b"; "
        pick, take = _numbered(self._pick, PICK), _numbered(self._take, TAKE)
        digest = hashlib.sha256(pick + take).hexdigest()[:16].encode()
        pick_name, take_name = b"jobq_pick_" + digest, b"jobq_take_" + digest
        self._prepare = (
            b"PREPARE " + pick_name + b" (text, timestamptz, bigint, timestamptz, int, float8, text)"
            b" AS " + pick,
            b"PREPARE " + take_name + b" (bigint, text, timestamptz, int) AS " + take)
        # The pick's and the take's EXECUTE lines are joined by hand, per call, not bound by
        # psycopg's client-side binding (a third of their CPU): what varies is plain ASCII
        # (ids, counts, ISO timestamps), and the text values are quoted once here.
        worker_literal = sql.Literal(worker).as_bytes(None)
        self._pick_head = b"EXECUTE " + pick_name + b"("
        self._pick_tail = b", " + repr(GRACE).encode() + b", " + worker_literal + b")"
        self._queue_literals: dict[str, bytes] = {}
        self._take_head = self._begin + b"; EXECUTE " + take_name + b"("
        self._take_mid = b", " + worker_literal + b", '"
        self._take_tails = tuple(b"', " + str(count).encode() + b"); " + self._savepoint
                                 for count in (0, 1))  # by the take's count
        self._prepared: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._misses = 0

    async def pick(self, conn: Conn, sweep: Sweep, queue: str, limit: int) -> list[Row]:
        """Up to ``limit`` jobs of the sweep, picked (committed, autocommit); the starts of those
        found STALE counted."""
        while self._misses < MISSES:
            query = await self._query(conn)
            try:
                await query.execute(self._pick_line(sweep, queue, limit))
            except errors.InvalidSqlStatementName:
                self._missing(conn)
                continue
            return await query.fetchall()
        params = {"limit": limit, "grace": GRACE, "worker": self._worker}
        cur = await conn.execute(self._pick, {**sweep.params(queue), **params})
        return await cur.fetchall()

    def _pick_line(self, sweep: Sweep, queue: str, limit: int) -> bytes:
        quoted = self._queue_literals.get(queue)
        if quoted is None:
            quoted = self._queue_literals[queue] = sql.Literal(queue).as_bytes(None)
        run_at, job_id = sweep.cursor
        return b"".join((self._pick_head, quoted, b", '", run_at.isoformat().encode(), b"', ",
                         str(job_id).encode(), b", ", sweep.until_literal(), b", ",
                         str(limit).encode(), self._pick_tail))

    @property
    def chains(self) -> bool:
        """Whether a take can follow a COMMIT in its round trip (``take(commit=True)``): only
        while the prepared statements are relied on."""
        return self._misses < MISSES

    async def take(self, conn: Conn, row: Row, *, commit: bool = False) -> bool:
        """BEGIN, lock and mark the job ``row`` picked (txn_take), SAVEPOINT; False if no longer ours.

        With ``commit``, the COMMIT of the job ``conn`` holds goes first, in the same round trip
        (the server runs nothing after a statement that fails). A psycopg.Error then means the
        COMMIT failed, or may have (the link lost); TakeFailedAfterCommit, that it went through
        and the take after it failed.
        """
        job_id, until, count = int(row[0]), row[PICKED], take_count(row)
        committed = False  # with ``commit``: the COMMIT is known to have gone through
        try:
            while self._misses < MISSES:
                query = await self._query(conn)
                line = b"".join((self._take_head, str(job_id).encode(), self._take_mid,
                                 until.isoformat().encode(), self._take_tails[count]))
                try:
                    await query.execute(self._commit + line if commit else line)
                except errors.InvalidSqlStatementName:  # the server got as far as the EXECUTE
                    committed, commit = committed or commit, False  # even if the rollback fails
                    await conn.rollback()
                    self._missing(conn)
                    continue
                for _ in range(2 if commit else 1):  # to the EXECUTE's result
                    query.nextset()
                return query.rowcount == 1
            if commit:
                await conn.commit()
                committed, commit = True, False
            params = {"id": job_id, "worker": self._worker, "until": until, "count": count}
            await conn.execute(self._begin)
            taken = await conn.execute(self._take, params)
            await conn.execute(self._savepoint)
            return taken.rowcount == 1
        except psycopg.Error as exc:
            if committed or (commit and conn.info.transaction_status in OPEN):
                raise TakeFailedAfterCommit(f"{type(exc).__name__}: {exc}") from exc
            raise

    async def _query(self, conn: Conn) -> psycopg.AsyncClientCursor[tuple[Any, ...]]:
        if conn not in self._prepared:
            conn.prepare_threshold = None
            # Already there: the same name, so the same text, left by an earlier client
            # session of this server connection (behind a pooler).
            for statement in self._prepare:
                with contextlib.suppress(errors.DuplicatePreparedStatement):
                    await conn.execute(statement)
            self._prepared.add(conn)
        return psycopg.AsyncClientCursor(conn)

    def _missing(self, conn: Conn) -> None:
        self._prepared.discard(conn)
        self._misses += 1
        if self._misses == MISSES:
            self._log.warning("the prepared claim statements keep going missing (a pooler in "
                              "transaction mode?): claiming with plain statements from now on")


def take_count(row: Row) -> int:
    """What the take of ``row`` (txn_pick's) adds to the job's attempts: 1, or 0 where the pick
    counted the start already (STALE: the job came back from a consumer that died)."""
    return 0 if row[STALE] else 1


def _numbered(statement: bytes, params: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """``statement`` with its named parameters as $1, $2, ... for PREPARE."""
    for named, number in params:
        statement = statement.replace(named, number)
    return statement


class Sweep:
    """One pass over the due jobs in (run_at, id) order, past a cursor.

    Picks may run concurrently, each from the cursor as it was when it started; the cursor
    moves past every job picked. With ``until`` (``--once``: the server's clock when the sweep
    began) a job that fails is due again only after that, so no claim of this sweep can find
    it again, however old its cursor, and the sweep ends. Without it (a consumer that runs
    on) each claim takes what is due by its own transaction's clock.
    """

    def __init__(self, until: datetime | None, now: float) -> None:
        self.until = until
        self.started_at = now  # the event loop's clock, to start the next one in time
        self.cursor: tuple[datetime, int] = (FIRST, 0)
        self._until_literal: bytes | None = None

    def params(self, queue: str) -> dict[str, Any]:
        """The claim's parameters for the next job of this sweep."""
        run_at, job_id = self.cursor
        return {"queue": queue, "after_run_at": run_at, "after_id": job_id, "until": self.until}

    def until_literal(self) -> bytes:
        """The sweep's end as an SQL literal: quoted ISO text (the prepared pick casts it
        back to a timestamp), or NULL."""
        if self._until_literal is None:
            self._until_literal = (b"NULL" if self.until is None
                                   else b"'" + self.until.isoformat().encode() + b"'")
        return self._until_literal

    def passed(self, row: Row) -> None:
        """A pick took the job of ``row`` (txn_pick's: id first, priority and run_at last).
        A job with a priority came from the start of the queue, not past the cursor: it
        leaves the cursor where it was."""
        if not row[-2]:
            self.cursor = max(self.cursor, (row[-1], int(row[0])))
