"""A lease-mode consumer's statements, each on a pool connection of its own within the
network deadline, rendered to bytes once: psycopg then finds their parsed form in its cache
instead of composing the identifiers and re-parsing the text on every execute.

A statement that loses its connection marks the consumer disconnected (``health``); the next
one that succeeds counts a reconnect.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq.core.errors import ConnectionLost
from jobq.transports.postgres.connect import pooled
from jobq.transports.postgres.lease_state import LeaseState
from jobq.transports.postgres.sql import Queries

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]


class Statements:
    """Runs the named statements of queries.sql for one lease-mode consumer."""

    def __init__(self, pool: Pool, queries: Queries, state: LeaseState, deadline: float) -> None:
        self._pool = pool
        self._queries = queries
        self._state = state
        self._deadline = deadline
        self._rendered: dict[str, bytes] = {}

    async def run(self, name: str, params: dict[str, Any], *, fetch: bool = False) -> list[Any]:
        """Run statement ``name`` with ``params``; its rows if ``fetch``."""
        state = self._state
        try:
            async with pooled(self._pool, f"postgres {name}", self._deadline) as conn:
                query = self._rendered.get(name)
                if query is None:
                    query = self._rendered[name] = self._queries[name].as_bytes(conn)
                cur = await conn.execute(query, params)
                rows = await cur.fetchall() if fetch else []
        except ConnectionLost:
            state.lost = True
            raise
        if state.lost:  # the pool got its connections back after a loss
            state.lost = False
            state.reconnects += 1
        return rows
