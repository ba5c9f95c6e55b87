"""``job.context`` in transaction mode: the job's connection, minus the means to end its transaction.

The job's transaction already holds its ``done`` mark, so a handler that commits it records
failed work as done, and one that rolls it back frees the row while the job still runs. The
proxy passes everything else through to the ``psycopg.AsyncConnection``: ``execute``,
``cursor``, ``pipeline``, and ``transaction()``, which inside the open transaction is a
savepoint. What it cannot stop (a ``COMMIT`` statement) the transport detects at the settle.

``enqueue`` / ``enqueue_many`` insert follow-up jobs in the same transaction: they exist once
the job's ack commits, and vanish with the handler's writes when it fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from jobq.core.errors import TransactionOwned
from jobq.core.port import NewJob
from jobq.transports.postgres.claims import Conn
from jobq.transports.postgres.joined import Joined

HOW = ("jobq commits the job's transaction with its ack, and rolls the handler's writes back "
       "when it fails; use `async with job.context.transaction():` for a savepoint")


class JobConnection:
    """The job's psycopg AsyncConnection; refuses to commit, roll back or close it."""

    __slots__ = ("_conn", "_joined")

    def __init__(self, conn: Conn, joined: Joined) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_joined", joined)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: object) -> None:
        # autocommit, isolation_level, read_only, ...: each would end or change the job's transaction
        _refuse(f"setting job.context.{name}")

    def __repr__(self) -> str:
        return f"<JobConnection of {self._conn!r}>"

    async def enqueue(self, job: NewJob, *, queue: str | None = None) -> str:
        """Enqueue a follow-up job in the job's transaction: it exists once the ack commits."""
        (job_id,) = await self.enqueue_many([job], queue=queue)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None) -> list[str]:
        """``enqueue`` for a batch (one statement); the ids in order."""
        joined: Joined = self._joined
        return await joined.enqueue_many(self._conn, jobs, queue=queue,
                                         timeout=joined.limits.enqueue_timeout)

    async def commit(self) -> NoReturn:
        """Refused: the job's transaction commits with its ack."""
        _refuse("job.context.commit()")

    async def rollback(self) -> NoReturn:
        """Refused: a failure rolls the handler's writes back to the job's savepoint."""
        _refuse("job.context.rollback()")

    async def close(self) -> NoReturn:
        """Refused: closing would roll the job's transaction back and free its row."""
        _refuse("job.context.close()")

    async def set_autocommit(self, value: bool) -> NoReturn:
        """Refused: the job's statements must stay inside its transaction."""
        _refuse("job.context.set_autocommit()")

    async def __aenter__(self) -> NoReturn:
        # `async with conn:` commits and closes the connection at its end.
        _refuse("`async with job.context:`")

    async def __aexit__(self, *exc: object) -> None:
        """Never reached: ``__aenter__`` refuses."""


def _refuse(what: str) -> NoReturn:
    raise TransactionOwned(f"{what} is refused: {HOW}")
