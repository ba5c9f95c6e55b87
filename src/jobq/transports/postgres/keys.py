"""Unique keys (``NewJob.key``): an enqueue whose key is taken returns the job holding it.

While a job with a key is pending or running in its queue, an enqueue with the same key inserts
nothing and gets that job's id (the unique partial index of migration 6 decides, race-free: a
concurrent insert of the same key waits for the first transaction, then skips). A key repeated
within one batch gets the id of its first job. A done or dead job frees its key.

The keys are looked up first (``keyed_ids``): a transaction-mode job that is running holds
its row in an open transaction that already marked it done, so an insert of its key would wait
for that transaction (the job's whole run) on the unique index; the look-up sees it pending and
takes its id instead. ``enqueue_keyed`` then inserts the rest and returns the inserted rows'
keys; the ones it skipped (taken meanwhile) are looked up again in the same transaction. A key
whose job finished between two statements is free again and inserted on the next round (at
most ROUNDS). On a caller's connection the whole of it runs in a savepoint, so a batch that
gives up leaves nothing behind in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import tuple_row

from jobq.core.errors import TransportError
from jobq.transports.postgres.sql import Queries

ROUNDS = 3


def has_keys(params: dict[str, list[Any]]) -> bool:
    """True when any job of the batch carries a key."""
    return any(key is not None for key in params.get("keys", ()))


def _subset(params: dict[str, list[Any]], positions: Sequence[int]) -> dict[str, list[Any]]:
    return {name: [values[i] for i in positions] for name, values in params.items()}


def _placed(keys: Sequence[str | None], rows: Sequence[tuple[Any, ...]]) -> list[str | None]:
    """The id of each position from the inserted rows (in order); None where its key was taken."""
    by_key = {row[2]: str(row[0]) for row in rows if row[2] is not None}
    unkeyed = iter(str(row[0]) for row in rows if row[2] is None)
    return [next(unkeyed) if key is None else by_key.get(key) for key in keys]


class _Rounds:
    """The bookkeeping of one keyed enqueue, round by round (no I/O: both drivers share it)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.queue: str = params["queue"]
        self.params: dict[str, list[Any]] = {k: v for k, v in params.items() if k != "queue"}
        self.ids: list[str | None] = [None] * len(self.params["kinds"])
        self.positions = list(range(len(self.ids)))  # still without an id
        self.xid: str | None = None
        self._got: list[str | None] = []

    def first(self) -> dict[str, Any]:
        """The keyed_ids parameters for every key of the batch, before any insert."""
        keys = sorted({key for key in self.params["keys"] if key is not None})
        return {"queue": self.queue, "keys": keys}

    def held(self, rows: Sequence[tuple[Any, ...]]) -> bool:
        """Take the ids of keys already held; True if that leaves nothing to insert."""
        existing = {str(key): str(job_id) for key, job_id in rows}
        for i in self.positions:
            key = self.params["keys"][i]
            if key is not None and key in existing:
                self.ids[i] = existing[key]
        self.positions = [i for i in self.positions if self.ids[i] is None]
        return not self.positions

    def insert(self) -> dict[str, Any]:
        """The enqueue_keyed parameters for the positions still without an id."""
        return {"queue": self.queue, **_subset(self.params, self.positions)}

    def inserted(self, rows: Sequence[tuple[Any, ...]]) -> dict[str, Any] | None:
        """Take the inserted rows; the keyed_ids parameters for the taken keys, or None."""
        self.xid = self.xid or (str(rows[0][1]) if rows else None)
        keys = [self.params["keys"][i] for i in self.positions]
        self._got = _placed(keys, rows)
        taken = sorted({key for key, job_id in zip(keys, self._got, strict=True) if job_id is None})
        return {"queue": self.queue, "keys": taken} if taken else None

    def found(self, rows: Sequence[tuple[Any, ...]]) -> bool:
        """Take the ids of the taken keys; True once every position has an id."""
        existing = {str(key): str(job_id) for key, job_id in rows}
        for i, job_id in zip(self.positions, self._got, strict=True):
            self.ids[i] = job_id or existing.get(self.params["keys"][i])
        self.positions = [i for i in self.positions if self.ids[i] is None]
        return not self.positions

    def result(self) -> list[str]:
        return [str(job_id) for job_id in self.ids]

    def exhausted(self) -> TransportError:
        keys = sorted({self.params["keys"][i] for i in self.positions})
        return TransportError(f"postgres enqueue: keys {keys} were taken, then freed, {ROUNDS} "
                              f"times in a row; nothing was enqueued for them")


async def insert_keyed(conn: Any, queries: Queries,
                       params: dict[str, Any]) -> tuple[list[str], str | None]:
    """Enqueue a keyed batch on ``conn`` (inside a transaction); the ids and the xid, if any.

    ``params``: enqueue_keyed's, the queue and the batch's arrays (joined.statement).
    """
    rounds = _Rounds(params)
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(queries["keyed_ids"], rounds.first())
    if rounds.held(await cur.fetchall()):
        return rounds.result(), None
    for _ in range(ROUNDS):
        await cur.execute(queries["enqueue_keyed"], rounds.insert())
        lookup = rounds.inserted(await cur.fetchall())
        found: list[tuple[Any, ...]] = []
        if lookup is not None:
            await cur.execute(queries["keyed_ids"], lookup)
            found = await cur.fetchall()
        if rounds.found(found):
            return rounds.result(), rounds.xid
    raise rounds.exhausted()


def insert_keyed_sync(conn: Any, queries: Queries, params: dict[str, Any]) -> list[str]:
    """``insert_keyed`` on a sync connection."""
    rounds = _Rounds(params)
    cur = conn.cursor(row_factory=tuple_row)
    if rounds.held(cur.execute(queries["keyed_ids"], rounds.first()).fetchall()):
        return rounds.result()
    for _ in range(ROUNDS):
        lookup = rounds.inserted(cur.execute(queries["enqueue_keyed"], rounds.insert()).fetchall())
        found = [] if lookup is None else cur.execute(queries["keyed_ids"], lookup).fetchall()
        if rounds.found(found):
            return rounds.result()
    raise rounds.exhausted()
