"""Postgres administration: schema migrations, dead-letter management, depth by state."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.errors import ConfigError
from jobq.transport import DeadJob, Depth
from jobq.transports.postgres.connect import translated
from jobq.transports.postgres.sql import Migration, Queries, migrations

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]


def render_migrations(schema: str, conn: psycopg.AsyncConnection[Any] | None = None) -> str:
    """The migration SQL as text, for ``jobq init --print-sql``."""
    out = []
    for m in migrations(schema):
        out.append(f"-- migration {m.version}: {m.title}\n{m.statement.as_string(conn)}\n")
    return "\n".join(out)


def shown_payload(text: str, limit: int = 500) -> Any:
    """A dead job's payload for display: parsed, or, if Python cannot parse it, its text cut short."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def schema_params(schema: str, needs: Mapping[str, str]) -> dict[str, Any]:
    """``schema_problems``' parameters for ``needs``: table -> privileges, e.g. "SELECT,UPDATE"."""
    return {"names": [sql.Identifier(schema, t).as_string(None) for t in needs],
            "privileges": list(needs.values())}


async def require_schema(pool: Pool, schema: str, needs: Mapping[str, str], needed_by: str) -> None:
    """ConfigError (exit 2) naming the fix if a table of ``needs`` or a privilege on it is missing.

    Without it a consumer started before ``jobq init``, or under a role short of a grant,
    retries its claim forever (or ends with the server's bare "relation does not exist").
    """
    with translated("postgres schema check"):
        async with pool.connection() as conn:
            cur = await conn.execute(Queries(schema)["schema_problems"], schema_params(schema, needs))
            check_schema(schema, await cur.fetchall(), needed_by)


def check_schema(schema: str, problems: Sequence[Sequence[Any]], needed_by: str) -> None:
    """Raise require_schema's ConfigError for ``schema_problems``' rows, if any."""
    missing = sorted({name for name, privilege, _ in problems if privilege is None})
    if missing:
        raise ConfigError(
            f"postgres.schema {schema!r} has no {' or '.join(missing)} table, which {needed_by} "
            "needs: run `jobq init` with the same config first (it creates or upgrades the schema)")
    if problems:
        role = problems[0][2]
        lacking = ", ".join(f"{privilege} on {name}" for name, privilege, _ in problems)
        raise ConfigError(f"postgres role {role!r} lacks {lacking}, which {needed_by} needs: grant "
                          "it (docs/security.md lists each role's grants)")


class PostgresAdmin:
    """Schema, dead letters and stats for one queue."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 logger: logging.Logger | None = None) -> None:
        self._pool = pool
        self._schema = settings.schema
        self._q = Queries(settings.schema)
        self._queue = queue
        self._log = logger or logging.getLogger("jobq.admin")

    async def init(self) -> str:
        """Create or upgrade the schema; one line naming the migrations applied now, if any."""
        applied = await self._migrate()
        return f"schema {self._schema!r}: " + (
            ", ".join(f"applied migration {m.version} ({m.title})" for m in applied) or "up to date")

    async def _migrate(self) -> list[Migration]:
        """Create or upgrade the schema; return the migrations applied now (none if current)."""
        applied: list[Migration] = []
        with translated("postgres init"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(self._q["migration_lock"], {"key": f"jobq:{self._schema}"})
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(self._schema)))
                await conn.execute(self._q["migrations_table"])
                cur = await conn.execute(self._q["migrations_applied"])
                done = {row[0] for row in await cur.fetchall()}
                for m in migrations(self._schema):
                    if m.version in done:
                        continue
                    await conn.execute(m.statement)
                    await conn.execute(self._q["migration_record"],
                                       {"version": m.version, "title": m.title})
                    applied.append(m)
        return applied

    async def dead_list(self, limit: int = 100) -> list[DeadJob]:
        """Dead jobs of the queue with their error, oldest first."""
        rows = await self._fetch("dead_list", {"queue": self._queue, "limit": limit})
        return [DeadJob(id=job_id, kind=kind, attempts=attempts, max_attempts=max_attempts,
                        last_error=error, finished_at=finished, payload=shown_payload(payload))
                for job_id, kind, attempts, max_attempts, error, finished, payload in rows]

    async def dead_requeue(self, ids: Sequence[int] | None = None, kind: str | None = None
                           ) -> list[str]:
        """Move dead jobs back to pending with attempts reset; unknown ids are refused."""
        await self._check_ids(ids)
        rows = await self._fetch("dead_requeue", {"queue": self._queue, "ids": ids, "kind": kind})
        return [str(row[0]) for row in rows]

    async def dead_purge(self, ids: Sequence[int] | None = None, kind: str | None = None
                         ) -> list[str]:
        """Delete dead jobs; unknown ids are refused."""
        await self._check_ids(ids)
        rows = await self._fetch("dead_purge", {"queue": self._queue, "ids": ids, "kind": kind})
        return [str(row[0]) for row in rows]

    async def depth(self) -> Depth:
        """Jobs still in the queue by state (pending, running, dead; done ones are not counted)
        and the age in seconds of the oldest pending job (None when none waits)."""
        rows = await self._fetch("depth", {"queue": self._queue})
        counts: dict[str, int | None] = {status: int(n) for status, n, _ in rows}
        oldest = next((float(age) for status, _, age in rows
                       if status == "pending" and age is not None), None)
        return Depth(depth=counts, oldest_pending_seconds=oldest)

    async def _check_ids(self, ids: Sequence[int] | None) -> None:
        if not ids:
            return
        found = {row[0] for row in await self._fetch(
            "dead_existing", {"queue": self._queue, "ids": list(ids)})}
        missing = [i for i in ids if i not in found]
        if missing:
            raise ConfigError(f"no dead job with id {', '.join(map(str, missing))} in queue "
                              f"{self._queue!r}; `jobq dead list` shows them", key="--id")

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        with translated(f"postgres {name}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(self._q[name], params)
                return await cur.fetchall()
