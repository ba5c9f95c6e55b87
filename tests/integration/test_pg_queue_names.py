"""PostgresAdmin.queues on a real table: every queue with a job in any state the indexes hold
(pending, running, done, dead) or a pause row, sorted, and nothing of another schema."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from jobq.config import load_settings
from jobq.wiring.container import admin_of
from tests.conftest import PG_DSN, ROOT, init_queue, jobs_table, schema_env


@pytest.fixture
def other_schema() -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    init_queue("postgres", "elsewhere", schema_env(name))
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def queues_of(schema: str) -> list[str]:
    settings = load_settings(ROOT / "configs" / "postgres.yaml", {"connect.attempts": 1},
                             env=schema_env(schema))

    async def ask() -> list[str]:
        async with admin_of(settings) as admin:
            return await admin.queues()

    return asyncio.run(ask())


def insert(conn: psycopg.Connection, schema: str, queue: str, status: str) -> None:
    finished = sql.SQL("now()" if status in ("done", "dead") else "NULL")
    locked = sql.SQL("now() + interval '1 minute'" if status == "running" else "NULL")
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, kind, payload, status, finished_at, locked_until, locked_by) "
        "VALUES (%s, 'k', '{{}}', %s, {}, {}, {})").format(
            jobs_table(schema), finished, locked,
            sql.SQL("'w'" if status == "running" else "NULL")), [queue, status])


def test_every_queue_of_the_table_and_the_paused_ones_none_of_another_schema(
        schema: str, other_schema: str) -> None:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for queue, status in (("mail", "pending"), ("mail", "dead"), ("web", "running"),
                              ("reports", "done"), ("reports", "done")):
            insert(conn, schema, queue, status)
        insert(conn, other_schema, "elsewhere", "pending")
        conn.execute(sql.SQL("INSERT INTO {}.queues (queue) VALUES ('quiet')")
                     .format(sql.Identifier(schema)))
    assert queues_of(schema) == ["mail", "quiet", "reports", "web"]
    assert queues_of(other_schema) == ["elsewhere"]
