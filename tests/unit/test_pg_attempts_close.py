"""Transaction mode's attempt log at shutdown: a lost connection must not fail a clean stop.

Regression (found by `make chaos`, postgres-transaction): the consumer that lived through every
fault drained cleanly on SIGTERM, then exited 3 because the attempt log's final forget ran on
a connection pg_terminate_backend had cut.
"""

from __future__ import annotations

from typing import Any

import psycopg

from jobq.sql import Queries
from jobq.transports.pg_attempts import AttemptLog


class CutConnection:
    """A pooled connection the server has terminated."""

    prepare_threshold: int | None = None

    async def execute(self, *_: Any) -> Any:
        raise psycopg.OperationalError("terminating connection due to administrator command")


class FakePool:
    def __init__(self) -> None:
        self.returned: list[Any] = []

    async def getconn(self) -> Any:
        return CutConnection()

    async def putconn(self, conn: Any) -> None:
        self.returned.append(conn)


async def test_close_after_the_connection_was_cut_does_not_raise_and_returns_it() -> None:
    pool = FakePool()
    log = AttemptLog(pool, Queries("jobq"))  # type: ignore[arg-type]
    log.acked(41)
    log.acked(42)
    await log.close()  # before: ConnectionLost("postgres attempt log: terminating ...") -> exit 3
    assert len(pool.returned) == 1  # the broken connection went back (the pool discards it)
