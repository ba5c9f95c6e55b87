"""The PostgreSQL network bounds: libpq parameters, the statement deadline, the config rule."""

from __future__ import annotations

import asyncio

import pytest

from jobq.config import load_settings
from jobq.core.errors import ConfigError, ConnectionLost
from jobq.transports.postgres.connect import deadline, network_params


def test_network_params_bound_both_ends_and_keep_what_the_dsn_sets() -> None:
    params = network_params("host=db dbname=x", 10)
    assert params["keepalives"] == 1 and params["tcp_user_timeout"] == 10_000
    assert params["keepalives_idle"] + params["keepalives_interval"] * params["keepalives_count"] <= 10
    assert "-c tcp_user_timeout=10000" in params["options"]
    assert "-c tcp_keepalives_idle=5" in params["options"]
    mine = network_params("host=db keepalives_idle=60 options='-c search_path=app'", 10)
    assert "keepalives_idle" not in mine  # the DSN's own value stays
    assert mine["options"].endswith("-c search_path=app")  # after ours: it wins


async def test_deadline_turns_a_hang_into_connection_lost() -> None:
    with pytest.raises(ConnectionLost, match=r"no answer from PostgreSQL within 0.05s"):
        async with deadline("postgres claim", 0.05):
            await asyncio.sleep(5)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_deadline_lets_a_hang_that_swallows_the_first_cancel_end_after_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobq.transports.postgres.connect.CANCEL_GRACE", 0.05)

    async def stubborn() -> None:  # as psycopg waits for a cancel request's answer
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            await asyncio.sleep(5)
            raise

    with pytest.raises(ConnectionLost):
        async with deadline("postgres ack", 0.05):
            await asyncio.wait_for(stubborn(), 10)


async def test_deadline_passes_an_outside_cancellation_through() -> None:
    async def body() -> None:
        async with deadline("postgres heartbeat", 10):
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_network_timeout_is_derived_and_must_be_shorter_than_the_lease() -> None:
    assert load_settings(env={}).postgres.network_deadline == 6  # the default lease is 12 s
    assert load_settings(overrides={"postgres.lease": 60}, env={}).postgres.network_deadline == 10
    assert load_settings(overrides={"postgres.lease": 4}, env={}).postgres.network_deadline == 2
    with pytest.raises(ConfigError, match=r"postgres\.network_timeout: must be shorter than postgres\.lease"):
        load_settings(overrides={"postgres.lease": 5, "postgres.network_timeout": 5}, env={})
