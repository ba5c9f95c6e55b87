"""PostgreSQL connections: open with retries and backoff, translate driver errors at the boundary."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from contextlib import AbstractContextManager

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobq.backoff import Backoff
from jobq.config import ConnectConfig, redact
from jobq.errors import ConnectionLost
from jobq.transports import common
from jobq.transports.common import error_text as _clean  # the name the connect loops use

# What "the link to the server broke" looks like from psycopg; any other psycopg.Error failed
# the statement only.
LINK_ERRORS: common.Errors = (psycopg.OperationalError, psycopg.InterfaceError)


def consumer_id() -> str:
    """A name for this consumer in ``locked_by``: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def server_address(dsn: str) -> str:
    """``host:port`` of a DSN, for messages (never the password)."""
    try:
        info = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<invalid dsn>"
    # No host: libpq connects through the local Unix socket.
    host = info.get("host") or info.get("hostaddr")
    return common.server_address(None if host is None else str(host), info.get("port"), 5432,
                                 no_host="local socket")


def translated(what: str) -> AbstractContextManager[None]:
    """Turn psycopg errors into jobq's: ConnectionLost when the link broke, else TransportError."""
    return common.translating(what, lost=LINK_ERRORS, failed=(psycopg.Error,), describe=_clean)


async def connect_once(dsn: str, connect: ConnectConfig, log: logging.Logger) -> psycopg.AsyncConnection[
    tuple[object, ...]
]:
    """One autocommit connection, retried with backoff; ConnectionLost naming host:port at the end."""
    where = server_address(dsn)
    async for attempt in Backoff.from_connect(connect).attempts(connect.attempts):
        try:
            return await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, connect_timeout=max(1, round(connect.timeout))
            )
        except psycopg.Error as exc:
            if attempt.last:
                raise ConnectionLost(
                    f"cannot reach PostgreSQL at {where} after {attempt.number} attempts: {_clean(exc)}"
                ) from exc
            log.warning("cannot reach PostgreSQL at %s (attempt %s): %s; retrying in %.1fs",
                        where, attempt, _clean(exc), attempt.delay)
    raise AssertionError("unreachable")


async def open_pool(
    dsn: str, connect: ConnectConfig, size: int, log: logging.Logger, *, min_size: int | None = None
) -> AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]]:
    """An open pool of up to ``size`` autocommit connections (``min_size`` of them opened now,
    default all), the server checked reachable."""
    probe = await connect_once(dsn, connect, log)
    await probe.close()
    pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]] = AsyncConnectionPool(
        dsn,
        min_size=size if min_size is None else min_size,
        max_size=size,
        open=False,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(connect.timeout))},
        timeout=max(connect.timeout, 30.0),
        reconnect_timeout=connect.backoff_max * connect.attempts,
        name="jobq",
    )
    try:
        await pool.open(wait=True, timeout=connect.timeout * connect.attempts)
    except Exception as exc:
        await pool.close()
        raise ConnectionLost(f"cannot open a pool to PostgreSQL at {server_address(dsn)}: "
                             f"{_clean(exc)}") from exc
    log.info("connected to PostgreSQL at %s (pool of %d)", redact(server_address(dsn)), size)
    return pool
