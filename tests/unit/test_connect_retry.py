"""Connecting to an unreachable PostgreSQL: one log line per try naming host:port, never the
password, delays growing with the attempt (full jitter, capped), then ConnectionLost."""

from __future__ import annotations

import logging

import pytest

from jobq.config import ConnectConfig
from jobq.core import backoff
from jobq.core.errors import ConnectionLost
from jobq.transports.postgres import connect as pg_connect

DSNS = ["postgresql://jobq:s3cret@127.0.0.1:1/app",
        "host=127.0.0.1 port=1 user=jobq password=s3cret dbname=app connect_timeout=1"]


@pytest.mark.parametrize("dsn", DSNS)
async def test_each_try_is_logged_then_connection_lost(
        dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    delays: list[float] = []

    async def no_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(backoff.asyncio, "sleep", no_sleep)
    connect = ConnectConfig(attempts=6, backoff_base=0.5, backoff_max=3.0, timeout=1.0)
    with caplog.at_level(logging.WARNING), pytest.raises(ConnectionLost) as info:
        await pg_connect.connect_once(dsn, connect, logging.getLogger("jobq.test"),
                                     network_timeout=10)
    assert str(info.value).startswith("cannot reach PostgreSQL at 127.0.0.1:1 after 6 attempts")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5 and len(delays) == 5  # a line and a pause before each retry
    for n, (line, delay) in enumerate(zip(lines, delays, strict=True), start=1):
        assert line.startswith(f"cannot reach PostgreSQL at 127.0.0.1:1 (attempt {n}/6)")
        assert 0 <= delay <= min(3.0, 0.5 * 2 ** (n - 1))
    assert "s3cret" not in str(info.value) + "".join(lines)
