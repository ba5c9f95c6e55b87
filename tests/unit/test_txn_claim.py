"""Transaction claim mode without a server: wiring, pool sizing, the sweep's bookkeeping."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dependency_injector import providers

from jobq.config import Settings, load_settings
from jobq.transports.postgres.claims import FIRST, ClaimStatement, Sweep
from jobq.transports.postgres.lease import PostgresTransport
from jobq.transports.postgres.sql import Queries
from jobq.transports.postgres.transaction import PgTransactionTransport
from jobq.wiring.container import Container
from jobq.wiring.derived import pg_pool_size, pool_buffer


def settings(**overrides: Any) -> Settings:
    return load_settings(None, {"transport": "postgres", **overrides}, env={})


class FakePool:
    """Stands in for the psycopg pool: wiring only, nothing connects."""

    max_size = 10


@pytest.mark.parametrize(("claim", "kind"), [("lease", PostgresTransport),
                                             ("transaction", PgTransactionTransport)])
def test_postgres_claim_selects_the_transport(claim: str, kind: type) -> None:
    container = Container(settings=settings(**{"postgres.claim": claim}))
    with container.pg_pool.override(providers.Object(FakePool())):
        assert isinstance(container.transport(), kind)


def test_transaction_mode_holds_no_buffer_and_sizes_its_pool_from_concurrency() -> None:
    txn = settings(**{"postgres.claim": "transaction", "consumer.concurrency": 16,
                      "consumer.buffer": 8, "consumer.processor": "noop"})
    lease = settings(**{"consumer.concurrency": 16, "consumer.buffer": 8})
    assert pool_buffer(txn) == 0  # a buffered delivery would hold a connection and a row lock
    assert pool_buffer(lease) == 8
    assert pg_pool_size(txn) == 18  # one per worker, one for picks, a spare
    assert pg_pool_size(lease) == 4
    configured = settings(**{"postgres.claim": "transaction", "postgres.pool_size": 7})
    assert pg_pool_size(configured) == 7  # a configured size wins; the transport warns if short
    container = Container(settings=txn)
    with container.pg_pool.override(providers.Object(FakePool())):
        assert container.worker_pool()._capacity.size == 16


def test_the_prepared_pick_and_take_are_the_queries_with_numbered_parameters() -> None:
    claim = ClaimStatement(Queries("s"), logging.getLogger("test"), "host:1:abc")
    pick, take = (statement.decode() for statement in claim._prepare)
    assert pick.startswith("PREPARE jobq_pick_") and take.startswith("PREPARE jobq_take_")
    assert "(text, timestamptz, bigint, timestamptz, int, float8, text) AS" in pick
    assert "(bigint, text, timestamptz, int) AS" in take
    for prepared, name, params in ((pick, "txn_pick", ("queue", "after_run_at", "after_id", "until",
                                                      "limit", "grace", "worker")),
                                   (take, "txn_take", ("id", "worker", "until", "count"))):
        body = Queries("s")[name].as_string(None)
        assert "%(" not in prepared.split(" AS ", 1)[1]
        for number, param in enumerate(params, 1):
            body = body.replace(f"%({param})s", f"${number}")
        assert prepared.endswith(body)
    other = ClaimStatement(Queries("t"), logging.getLogger("test"), "host:1:abc")
    assert other._prepare[0].split(b" ", 2)[1] != claim._prepare[0].split(b" ", 2)[1]  # per schema


def test_a_sweep_moves_past_every_job_handed_out() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    sweep = Sweep(until=start, now=0.0)
    assert sweep.cursor == (FIRST, 0) and sweep.params("q")["until"] == start
    later, earlier = start - timedelta(seconds=1), start - timedelta(seconds=5)
    sweep.passed((7, "k", {}, {}, 0, 5, None, 0, later))
    sweep.passed((9, "k", {}, {}, 0, 5, None, 0, earlier))  # a claim that started earlier ends late
    sweep.passed((11, "k", {}, {}, 0, 5, None, 3, start))  # a priority job: from the start
    assert sweep.cursor == (later, 7)
    params = sweep.params("q")
    assert (params["after_run_at"], params["after_id"], params["queue"]) == (later, 7, "q")


def test_a_sweep_without_an_end_leaves_the_due_check_to_the_server() -> None:
    sweep = Sweep(until=None, now=0.0)
    assert sweep.params("q")["until"] is None and sweep.until_literal() == b"NULL"
    ended = Sweep(until=datetime(2026, 1, 1, tzinfo=UTC), now=0.0)
    assert ended.until_literal() == b"'2026-01-01T00:00:00+00:00'"


def test_the_lease_claim_and_ack_commit_as_postgres_async_commit_says() -> None:
    from psycopg import sql

    def text(queries: Queries, name: str) -> str:
        return queries[name].as_string(None)

    fast, durable = Queries("s"), Queries("s", async_commit=False)
    for name in ("claim", "claim_after", "ack"):
        assert "set_config('synchronous_commit', 'off', true)" in text(fast, name)
        assert ("set_config('synchronous_commit', current_setting('synchronous_commit'), true)"
                in text(durable, name))
    # A transaction-mode pick is only a mark: it stays asynchronous either way.
    assert "'off'" in text(durable, "txn_pick")
    assert isinstance(durable["ack"], sql.Composed)
