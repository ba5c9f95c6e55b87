"""Transaction claim mode without a server: wiring, pool sizing, the sweep's bookkeeping."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from dependency_injector import providers

from jobq.config import Settings, load_settings
from jobq.container import Container, pg_pool_size, pool_buffer
from jobq.sql import Queries
from jobq.transports.pg_claim import ClaimStatement, Sweep
from jobq.transports.pg_transaction import PgTransactionTransport
from jobq.transports.postgres import PostgresTransport


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
                      "consumer.buffer": 8})
    lease = settings(**{"consumer.concurrency": 16, "consumer.buffer": 8})
    assert pool_buffer(txn) == 0  # a buffered delivery would hold a connection and a row lock
    assert pool_buffer(lease) == 8
    assert pg_pool_size(txn) == 18  # one per worker, the attempt log, a spare
    assert pg_pool_size(lease) == 4
    configured = settings(**{"postgres.claim": "transaction", "postgres.pool_size": 7})
    assert pg_pool_size(configured) == 7  # a configured size wins; the transport warns if short
    container = Container(settings=txn)
    with container.pg_pool.override(providers.Object(FakePool())):
        assert container.worker_pool()._capacity == 16


def test_the_prepared_claim_is_txn_claim_with_numbered_parameters() -> None:
    claim = ClaimStatement(Queries("s"), logging.getLogger("test"))
    prepared = claim._prepare.decode()
    body = Queries("s")["txn_claim"].as_string(None)
    assert prepared.startswith("PREPARE jobq_claim_") and "(text, bigint, bigint) AS" in prepared
    assert "%(" not in prepared.split(" AS ", 1)[1]
    numbered = body.replace("%(queue)s", "$1").replace("%(cursor)s", "$2").replace("%(last)s", "$3")
    assert prepared.endswith(numbered)
    other = ClaimStatement(Queries("t"), logging.getLogger("test"))
    assert other._prepare.split(b" ", 2)[1] != claim._prepare.split(b" ", 2)[1]  # name per schema


def test_a_sweep_hands_out_each_job_once_until_it_restarts() -> None:
    sweep = Sweep(last=100, now=0.0)
    early, late = sweep.begin(), sweep.begin()  # two claims running from cursor 0
    assert sweep.end(early, 7) and sweep.cursor == 7
    assert not sweep.end(late, 7)  # job 7 failed, was due again, and the older claim found it
    assert sweep.begin() == 7  # the next claim starts past it
    sweep.restart(now=1.0)
    assert sweep.cursor == 0 and sweep.end(sweep.begin(), 7)  # a new sweep may run it again


def test_a_sweep_forgets_ids_no_running_claim_can_return() -> None:
    sweep = Sweep(last=10**9, now=0.0)
    slow = sweep.begin()  # still running from cursor 0: every id stays remembered
    for job_id in range(1, Sweep.PRUNE_AT + 10):
        assert sweep.end(sweep.begin(), job_id)
    assert len(sweep._handed) > Sweep.PRUNE_AT
    assert not sweep.end(slow, 3)
    sweep.end(sweep.begin(), Sweep.PRUNE_AT + 20)  # nothing runs from below the cursor now
    assert len(sweep._handed) <= 1
    assert sweep._scanning == {}
