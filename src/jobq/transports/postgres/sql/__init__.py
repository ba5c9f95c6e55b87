"""Loads the named SQL blocks of ``queries.sql`` and the migrations of ``schema.sql``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^-- migration: (\d+) (.*)$", re.MULTILINE)


# A claim from the cursor starts past the last job its consumer claimed (postgres/cursor.py):
# a bound of the scan of jobs_pending_idx, whose key is (queue, run_at, id).
AFTER = sql.SQL("AND (run_at, id) > (%(after_run_at)s, %(after_id)s)")


def _read(filename: str) -> str:
    return resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")


def _blocks(pattern: re.Pattern[str], text: str) -> list[tuple[re.Match[str], str]]:
    marks = list(pattern.finditer(text))
    out = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((mark, text[mark.end():end].strip()))
    return out


def _identifiers(schema: str) -> dict[str, sql.Composable]:
    return {
        "schema": sql.Identifier(schema),
        "jobs": sql.Identifier(schema, "jobs"),
        "migrations": sql.Identifier(schema, "migrations"),
        "queues": sql.Identifier(schema, "queues"),
        "attempts": sql.Identifier(schema, "attempts"),
        "schedules": sql.Identifier(schema, "schedules"),
        "cancels": sql.Identifier(schema, "cancels"),
        "notify_fn": sql.Identifier(schema, "notify_jobs"),
        "running_idx": sql.Identifier(schema, "jobs_running_idx"),
    }


class Queries:
    """Every statement of ``queries.sql``, with the schema's identifiers filled in;
    ``async_commit``: the lease claim and ack commit without waiting for the WAL flush
    (``postgres.async_commit``), else as the session's ``synchronous_commit`` says."""

    def __init__(self, schema: str, *, async_commit: bool = True) -> None:
        names = {**_identifiers(schema), "commit": sql.Literal("off") if async_commit
                 else sql.SQL("current_setting('synchronous_commit')")}
        self._by_name: dict[str, sql.Composed] = {}
        for mark, body in _blocks(_NAME, _read("queries.sql")):
            text = sql.SQL(body.rstrip(";"))
            if "{after}" in body:  # the lease claim: from the start, and from a cursor
                self._by_name[mark.group(1)] = text.format(**names, after=sql.SQL(""))
                self._by_name[f"{mark.group(1)}_after"] = text.format(**names, after=AFTER)
            else:
                self._by_name[mark.group(1)] = text.format(**names)
        self.channel = f"{schema}.jobs"

    def __getitem__(self, name: str) -> sql.Composed:
        return self._by_name[name]


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned block of ``schema.sql``."""

    version: int
    title: str
    statement: sql.Composed


def migrations(schema: str) -> list[Migration]:
    """The schema's migrations in order, identifiers filled in."""
    names = _identifiers(schema)
    return [
        Migration(int(mark.group(1)), mark.group(2).strip(),
                  sql.SQL(body).format(**names))
        for mark, body in _blocks(_MIGRATION, _read("schema.sql"))
    ]
