"""Enqueue inside the caller's own transaction: the jobs exist if and only if it commits.

``PostgresPublisher.enqueue(job, connection=conn)`` (psycopg ``AsyncConnection``),
``enqueue_sync(conn, job, ...)`` (a sync ``psycopg.Connection``: Django, Flask, scripts) and, in
transaction mode, ``job.context.enqueue(job)`` (follow-ups that commit with the job's ack) run
the same INSERT as any enqueue on a connection jobq does not own:

- the connection must be inside a transaction (``async with conn.transaction():``, or after a
  statement with autocommit off): one that is idle, or aborted, is refused with
  ``TransactionRequired`` and nothing is sent;
- nothing is retried and nothing committed: the outcome is the caller's transaction's. A
  statement that fails leaves it aborted, as any failed statement would;
- the limits are checked before anything is sent; with ``limits.max_pending`` only as many go
  in as the queue has room for, at once (waiting for room would hold the caller's transaction
  open), and ``QueueFull`` carries those that went in (``accepted``: they commit with it);
- the NOTIFY that wakes consumers is sent by the server at COMMIT, never before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from jobq.config import LimitsConfig
from jobq.core.due import wait_of
from jobq.core.errors import ConfigError, ConnectionLost, QueueFull, TransactionRequired
from jobq.core.limits import encode_new_job
from jobq.core.port import NewJob
from jobq.core.within import Deadline
from jobq.transports.postgres.connect import translated
from jobq.transports.postgres.keys import has_keys, insert_keyed, insert_keyed_sync
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.text import nul_free

_STATES = {TransactionStatus.IDLE: "not in a transaction (autocommit, or nothing begun)",
           TransactionStatus.INERROR: "in a failed transaction (roll it back first)",
           TransactionStatus.ACTIVE: "running another statement",
           TransactionStatus.UNKNOWN: "broken"}
HOW = "open one with `with conn.transaction():` (or `async with`) and enqueue inside it"


def columns(jobs: Sequence[NewJob], limits: LimitsConfig, max_attempts: int) -> dict[str, list[Any]]:
    """The enqueue statement's arrays for ``jobs``; MalformedJob / JobTooLarge before any I/O."""
    encoded = [encode_new_job(job, limits) for job in jobs]
    now = datetime.now(UTC)
    for payload, headers in encoded:
        nul_free(payload, headers)
    return {
        "kinds": [job.kind for job in jobs],
        "payloads": [payload for payload, _ in encoded],
        "headers": [headers for _, headers in encoded],
        "max_attempts": [job.max_attempts or max_attempts for job in jobs],
        "delays": [wait_of(job, now) for job in jobs],
        "keys": [job.key for job in jobs],
        "priorities": [job.priority for job in jobs],
    }


def refuse_keys_with_cap(params: dict[str, list[Any]], cap: int) -> None:
    """ConfigError for a batch with unique keys on a queue with ``limits.max_pending``: it is
    refused rather than enqueued past the cap or without its keys."""
    if cap and has_keys(params):
        raise ConfigError("unique keys (NewJob.key) cannot be combined with limits.max_pending "
                          "yet: enqueue keyed jobs on a queue without a cap",
                          key="limits.max_pending")


def statement(queue: str, params: dict[str, list[Any]], cap: int) -> tuple[str, dict[str, Any]]:
    """Which enqueue statement ``params`` need, and its parameters.

    A batch with unique keys takes enqueue_keyed (keys.py), never with a cap
    (refuse_keys_with_cap).
    """
    refuse_keys_with_cap(params, cap)
    if has_keys(params):
        return "enqueue_keyed", {"queue": queue, **params}
    plain = {name: values for name, values in params.items() if name != "keys"}
    if cap:
        return "enqueue_bounded", {"queue": queue, "cap": cap, **plain}
    return "enqueue", {"queue": queue, **plain}


def _require_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    status = conn.info.transaction_status
    if status != TransactionStatus.INTRANS:
        raise TransactionRequired(f"a transactional enqueue needs a connection inside a "
                                  f"transaction; this one is {_STATES.get(status, status.name)}: "
                                  f"{HOW}")


@dataclass(frozen=True, slots=True)
class Joined:
    """What an enqueue on a caller's connection needs: the statements, the queue, the limits."""

    queries: Queries
    queue: str
    max_attempts: int
    limits: LimitsConfig

    def _checked(self, queue: str, wanted: int, rows: list[tuple[Any, ...]]) -> list[str]:
        ids = [str(row[0]) for row in rows]
        if len(ids) < wanted:
            raise QueueFull(f"queue {queue!r} is full: {self.limits.max_pending} jobs pending "
                            f"(limits.max_pending), no room for {wanted - len(ids)} more; a "
                            f"transactional enqueue does not wait for room", accepted=tuple(ids))
        return ids

    async def enqueue_many(self, conn: psycopg.AsyncConnection[Any], jobs: Sequence[NewJob], *,
                           queue: str | None = None, timeout: float) -> list[str]:
        """Insert ``jobs`` in ``conn``'s open transaction; their ids (committed with it)."""
        params = columns(jobs, self.limits, self.max_attempts)
        _require_transaction(conn)
        queue = queue or self.queue
        name, values = statement(queue, params, self.limits.max_pending)
        try:
            with translated("postgres enqueue (in the caller's transaction)"):
                async with Deadline(timeout):
                    if name == "enqueue_keyed":
                        async with conn.transaction():  # a savepoint: all or nothing
                            ids, _ = await insert_keyed(conn, self.queries, values)
                        return ids
                    cur = conn.cursor(row_factory=tuple_row)
                    await cur.execute(self.queries[name], values)
                    rows = await cur.fetchall()
        except TimeoutError:
            raise ConnectionLost(f"postgres enqueue (in the caller's transaction): no answer "
                                 f"within {timeout:g}s (limits.enqueue_timeout); the transaction "
                                 f"should be rolled back") from None
        return self._checked(queue, len(jobs), rows)

    def enqueue_many_sync(self, conn: psycopg.Connection[Any], jobs: Sequence[NewJob], *,
                          queue: str | None = None) -> list[str]:
        """``enqueue_many`` for a sync connection (its own timeouts bound the statement)."""
        params = columns(jobs, self.limits, self.max_attempts)
        _require_transaction(conn)
        queue = queue or self.queue
        name, values = statement(queue, params, self.limits.max_pending)
        with translated("postgres enqueue (in the caller's transaction)"):
            if name == "enqueue_keyed":
                with conn.transaction():  # a savepoint: all or nothing
                    return insert_keyed_sync(conn, self.queries, values)
            rows = conn.cursor(row_factory=tuple_row).execute(self.queries[name], values).fetchall()
        return self._checked(queue, len(jobs), rows)


def enqueue_sync(conn: psycopg.Connection[Any], job: NewJob, *, queue: str,
                 schema: str = "jobq", max_attempts: int = 5,
                 limits: LimitsConfig | None = None) -> str:
    """Enqueue ``job`` in ``conn``'s open transaction (a sync psycopg connection); its id.

    The job exists if and only if that transaction commits. ``schema``, ``max_attempts`` and
    ``limits`` as the consumers' config has them (``postgres.schema``, ``retry.max_attempts``).
    """
    (job_id,) = enqueue_many_sync(conn, [job], queue=queue, schema=schema,
                                  max_attempts=max_attempts, limits=limits)
    return job_id


def enqueue_many_sync(conn: psycopg.Connection[Any], jobs: Sequence[NewJob], *, queue: str,
                      schema: str = "jobq", max_attempts: int = 5,
                      limits: LimitsConfig | None = None) -> list[str]:
    """``enqueue_sync`` for a batch: one statement; the ids in order."""
    joined = Joined(Queries(schema), queue, max_attempts, limits or LimitsConfig())
    return joined.enqueue_many_sync(conn, jobs)
