"""The FastAPI example against the real PostgreSQL: an order that commits has its receipt job,
one that rolls back has none."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.conftest import PG_DSN, init_queue, schema_env


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, str]]:
    """The app, served in the test (its lifespan run), and its jobq schema of its own."""
    schema = f"t_{uuid.uuid4().hex[:10]}"
    init_queue("postgres", "default", schema_env(schema))
    monkeypatch.setenv("JOBQ_POSTGRES__SCHEMA", schema)
    monkeypatch.setenv("JOBQ_POSTGRES__DSN", PG_DSN)
    monkeypatch.setenv("DATABASE_URL", PG_DSN)
    from .app import api
    try:
        with TestClient(api) as client:
            yield client, schema
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def receipts(schema: str, order_id: int) -> int:
    with psycopg.connect(PG_DSN) as conn:
        query = sql.SQL("SELECT count(*) FROM {} WHERE kind = 'send_receipt' "
                        "AND (payload->>'order_id')::bigint = %s").format(sql.Identifier(schema, "jobs"))
        row = conn.execute(query, (order_id,)).fetchone()
        return int(row[0]) if row else 0


def test_an_order_and_its_receipt_commit_together(shop: tuple[TestClient, str]) -> None:
    client, schema = shop
    answer = client.post("/orders", json={"email": "a@example.com", "items": 2})
    assert answer.status_code == 200, answer.text
    assert receipts(schema, answer.json()["order"]) == 1


def test_an_order_that_rolls_back_leaves_no_receipt(shop: tuple[TestClient, str]) -> None:
    client, schema = shop
    answer = client.post("/orders", json={"email": "b@example.com", "items": 0})
    assert answer.status_code == 400, answer.text
    # The schema is this test's own: had the job not joined the order's transaction, it
    # would be there.
    with psycopg.connect(PG_DSN) as conn:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs"))
        row = conn.execute(query).fetchone()
    assert row is not None and row[0] == 0, row
