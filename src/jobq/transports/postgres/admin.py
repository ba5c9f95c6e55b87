"""Postgres administration: schema migrations, dead letters, depth by state, pause, pruning."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobq.config import PostgresConfig
from jobq.core.attempts import history
from jobq.core.errors import ConfigError, NoSuchJob, TransportError
from jobq.core.port import DeadJob, Depth, JobInfo, PauseState
from jobq.transports.common import shown_payload
from jobq.transports.postgres.connect import Fetch, pooled, taken, translated
from jobq.transports.postgres.control import JobControl, job_id
from jobq.transports.postgres.refusals import schema_mistake
from jobq.transports.postgres.retention import Pruner
from jobq.transports.postgres.sql import Migration, Queries, migrations

Pool = AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]]


def render_migrations(schema: str) -> str:
    """The migration SQL as text, for ``jobq init --print-sql``."""
    out = []
    for m in migrations(schema):
        out.append(f"-- migration {m.version}: {m.title}\n{m.statement.as_string(None)}\n")
    return "\n".join(out)


def pool_fetch(pool: Pool, queries: Queries, seconds: float | None = None) -> Fetch:
    """Runs a named statement of ``queries`` on a connection of ``pool``; returns its rows.

    With ``seconds``, the statement has that deadline as every consumer statement does
    (connect.pooled); without, an operator's command (a purge of many rows) may take long.
    """
    async def fetch(name: str, params: dict[str, Any]) -> list[Any]:
        if seconds is not None:
            async with pooled(pool, f"postgres {name}", seconds) as conn:
                cur = await conn.execute(queries[name], params)
                return await cur.fetchall()
        with translated(f"postgres {name}"):
            async with taken(pool) as conn:
                cur = await conn.execute(queries[name], params)
                return await cur.fetchall()
    return fetch


async def require_schema(fetch: Fetch, schema: str, needs: Mapping[str, str], needed_by: str) -> None:
    """ConfigError (exit 2) naming the fix if a table of ``needs`` (table -> privileges, e.g.
    "SELECT,UPDATE") or a privilege on it is missing; ``fetch`` runs the check's statement.

    Without it a consumer started before ``jobq init``, or under a role short of a grant,
    retries its claim forever (or ends with the server's bare "relation does not exist").
    """
    try:
        problems = await fetch("schema_problems", {
            "names": [sql.Identifier(schema, t).as_string(None) for t in needs],
            "privileges": list(needs.values())})
    except TransportError as exc:  # no USAGE on the schema: even looking in it is denied
        if not isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
            raise
        raise ConfigError(f"its role may not use schema {schema!r}, which "
                          f"{needed_by} needs ({exc.__cause__}): grant it USAGE (docs/security.md "
                          "lists each role's grants)", key="postgres.dsn") from exc
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


def explained(fetch: Fetch, explain: Callable[[BaseException | None], ConfigError | None]
              ) -> Fetch:
    """``fetch`` raising ``explain``'s ConfigError for the TransportErrors it explains."""
    async def run(name: str, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        try:
            return await fetch(name, params)
        except TransportError as exc:
            mistake = explain(exc.__cause__)
            if mistake is None:
                raise
            raise mistake from exc
    return run


class PostgresAdmin:
    """Schema, dead letters, stats and pruning for one queue."""

    def __init__(self, pool: Pool, settings: PostgresConfig, *, queue: str,
                 pruner: Pruner | None = None) -> None:
        self._pool = pool
        self._pruner = pruner or Pruner(pool, settings, queue=queue)
        self._schema = settings.schema
        self._q = Queries(settings.schema)
        self._raw = pool_fetch(pool, self._q)
        # What consumers ask every second or so (depth, pause): a look left running when
        # its consumer stops must end within the deadline (psycopg's own cancel of a
        # statement on a dark link waits 5 + 5 s; seen as a shutdown 3 s over its bound).
        self._raw_look = pool_fetch(pool, self._q, settings.network_deadline)
        # A schema `jobq init` never made, or a missing grant: exit 2 naming the fix, not
        # the server's words with exit 3 as if it were away.
        self._explain = functools.partial(schema_mistake, schema=settings.schema, dsn=settings.dsn)
        self._fetch = explained(self._raw, self._explain)
        self._look = explained(self._raw_look, self._explain)
        self._queue = queue
        self._control = JobControl(self._fetch, queue=queue, channel=self._q.channel,
                                   requeue_dead=self.dead_requeue)

    async def show_job(self, job_id: str) -> JobInfo:
        """One job by id, in any state."""
        return await self._control.show(job_id)

    async def list_jobs(self, state: str, kind: str | None = None, limit: int = 100
                        ) -> list[JobInfo]:
        """Jobs in ``state``, of ``kind`` if given."""
        return await self._control.list(state, kind, limit)

    async def cancel_job(self, job_id: str) -> str:
        """Cancel a pending job, or ask a running one's consumer to stop it."""
        return await self._control.cancel(job_id)

    async def retry_job(self, job_id: str) -> str:
        """Run a dead or delayed job now."""
        return await self._control.retry(job_id)

    async def init(self) -> str:
        """Create or upgrade the schema; one line naming the migrations applied now, if any."""
        try:
            applied = await self._migrate()
        except TransportError as exc:  # a role that may not create the schema
            mistake = self._explain(exc.__cause__)
            if mistake is None:
                raise
            raise mistake from exc
        return f"schema {self._schema!r}: " + (
            ", ".join(f"applied migration {m.version} ({m.title})" for m in applied) or "up to date")

    async def _migrate(self) -> list[Migration]:
        """Create or upgrade the schema; return the migrations applied now (none if current)."""
        applied: list[Migration] = []
        with translated("postgres init"):
            async with taken(self._pool) as conn, conn.transaction():
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
                        last_error=error, finished_at=finished, payload=shown_payload(payload),
                        errors=tuple(history(errors)))
                for job_id, kind, attempts, max_attempts, error, finished, payload, errors in rows]

    async def dead_requeue(self, ids: Sequence[str] | None = None, kind: str | None = None
                           ) -> list[str]:
        """Move dead jobs back to pending with attempts reset; unknown ids are refused, and so
        are ids of jobs that could never run (a kind, payload or headers the schema refuses
        as pending: migration 13); without ids, such jobs stay dead."""
        numbers = await self._check_ids(ids)
        if numbers:
            unrunnable = await self._fetch("dead_unrunnable", {"queue": self._queue, "ids": numbers})
            if unrunnable:
                raise ConfigError("; ".join(f"job {job_id} cannot run again: {why}"
                                            for job_id, why in unrunnable)
                                  + ": nothing requeued (`jobq dead purge --id` removes it)",
                                  key="--id")
        rows = await self._fetch("dead_requeue", {"queue": self._queue, "ids": numbers, "kind": kind})
        return [str(row[0]) for row in rows]

    async def dead_purge(self, ids: Sequence[str] | None = None, kind: str | None = None
                         ) -> list[str]:
        """Delete dead jobs; unknown ids are refused."""
        numbers = await self._check_ids(ids)
        rows = await self._fetch("dead_purge", {"queue": self._queue, "ids": numbers, "kind": kind})
        return [str(row[0]) for row in rows]

    async def prune(self, state: str, older_than: float) -> int:
        """Delete ``state`` jobs finished more than ``older_than`` s ago, batched as the
        consumers' pruner does (it is the same code, and takes the same lock)."""
        # Checked first: a DELETE that fails closes the pruner's connection, and the pool
        # says so on stderr beside the error.
        await require_schema(self._fetch, self._schema, {"jobs": "SELECT,DELETE"}, "jobq prune")
        return await self._pruner.prune(state, older_than)

    async def depth(self) -> Depth:
        """Jobs still in the queue by state (pending, running, dead; done ones are not counted)
        and the age in seconds of the oldest pending job (None when none waits)."""
        rows = await self._look("depth", {"queue": self._queue})
        counts: dict[str, int | None] = {status: int(n) for status, n, _ in rows}
        oldest = next((float(age) for status, _, age in rows
                       if status == "pending" and age is not None), None)
        return Depth(depth=counts, oldest_pending_seconds=oldest)

    async def queues(self) -> list[str]:
        """Every queue of the schema's table: with a job in it, or ever paused (at most 500)."""
        return [name for (name,) in await self._look("queue_names", {})]

    async def pause(self) -> PauseState:
        """Mark the queue paused from now; one already paused keeps its time."""
        rows = await self._queues("pause", needed=True)
        if rows:
            return PauseState(paused=True, since=rows[0][0], changed=True)
        return await self.pause_state()

    async def resume(self) -> PauseState:
        """Clear the queue's pause; the answer carries the time of the pause it ended."""
        rows = await self._queues("resume", needed=True)
        return PauseState(paused=False, since=rows[0][0] if rows else None, changed=bool(rows))

    async def paused(self) -> bool:
        """Whether the queue is paused (a primary-key probe)."""
        return (await self.pause_state()).paused

    async def pause_state(self) -> PauseState:
        """Whether the queue is paused and since when."""
        rows = await self._queues("paused", needed=False, fetch=self._raw_look)
        since = rows[0][0] if rows else None
        return PauseState(paused=since is not None, since=since)

    async def _queues(self, name: str, *, needed: bool, fetch: Fetch | None = None
                      ) -> Sequence[Sequence[Any]]:
        """A statement on the queues table (through ``fetch``, default the operator's); a
        schema from before migration 7 has none: no rows (never paused), or, where it is
        ``needed``, a ConfigError naming `jobq init`."""
        try:
            return await (fetch or self._raw)(name, {"queue": self._queue})
        except TransportError as exc:
            mistake = self._explain(exc.__cause__)
            if mistake is None:
                raise
            if not isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
                raise mistake from exc
            if needed:
                raise ConfigError(f"postgres.schema {self._schema!r} has no queues table (pause "
                                  "and resume, migration 7): run `jobq init` with the same "
                                  "config first") from exc
            return []

    async def _check_ids(self, ids: Sequence[str] | None) -> list[int] | None:
        """``ids`` as the table's integers; ConfigError for one that is not a dead job here."""
        if not ids:
            return None
        numbers = [job_id(i) for i in ids]
        found = {row[0] for row in await self._fetch(
            "dead_existing", {"queue": self._queue, "ids": numbers})}
        missing = [i for i in numbers if i not in found]
        if missing:
            raise NoSuchJob(f"no dead job {', '.join(map(str, missing))} in queue "
                              f"{self._queue!r}; `jobq dead list` shows them")
        return numbers
