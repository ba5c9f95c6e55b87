"""job.context in transaction mode: everything passes through but the end of the transaction."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobq import TransactionOwned
from jobq.config import LimitsConfig
from jobq.transports.postgres.job_connection import JobConnection
from jobq.transports.postgres.joined import Joined
from jobq.transports.postgres.sql import Queries

WAY = "use `async with job.context.transaction():` for a savepoint"


class FakeConnection:
    """Records what reaches the connection."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.autocommit = True

    async def execute(self, query: str) -> str:
        self.calls.append(query)
        return "cursor"

    def transaction(self) -> str:
        self.calls.append("transaction")
        return "savepoint"

    async def commit(self) -> None:
        self.calls.append("commit")

    async def rollback(self) -> None:
        self.calls.append("rollback")

    async def close(self) -> None:
        self.calls.append("close")


def wrapped() -> tuple[Any, FakeConnection]:
    conn = FakeConnection()
    joined = Joined(Queries("jobq"), "q", 5, LimitsConfig())
    return JobConnection(conn, joined), conn  # type: ignore[arg-type]


async def test_statements_and_savepoints_pass_through() -> None:
    context, conn = wrapped()
    assert await context.execute("SELECT 1") == "cursor"
    assert context.transaction() == "savepoint"
    assert context.autocommit is True
    assert conn.calls == ["SELECT 1", "transaction"]


@pytest.mark.parametrize("method", ["commit", "rollback", "close"])
async def test_ending_the_transaction_is_refused_naming_the_way(method: str) -> None:
    context, conn = wrapped()
    with pytest.raises(TransactionOwned, match=re.escape(f"job.context.{method}() is refused")) as refused:
        await getattr(context, method)()
    assert WAY in str(refused.value)
    assert conn.calls == []


async def test_autocommit_and_async_with_are_refused() -> None:
    context, conn = wrapped()
    with pytest.raises(TransactionOwned, match=re.escape(WAY)):
        await context.set_autocommit(True)
    with pytest.raises(TransactionOwned, match=re.escape("setting job.context.autocommit")):
        context.autocommit = False
    with pytest.raises(TransactionOwned, match=re.escape("`async with job.context:`")):
        async with context:
            pass
    assert conn.autocommit is True and conn.calls == []
