"""PostgreSQL connections: open with retries and backoff, translate driver errors at the boundary."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobq.backoff import Backoff
from jobq.config import ConnectConfig, redact
from jobq.errors import ConnectionLost, TransportError


def consumer_id() -> str:
    """A name for this consumer in ``locked_by``: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def server_address(dsn: str) -> str:
    """``host:port`` of a DSN, for messages (never the password)."""
    try:
        info = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<invalid dsn>"
    host = str(info.get("host") or info.get("hostaddr") or "local socket")
    return f"{host}:{info.get('port') or 5432}"


def _clean(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", text)


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn psycopg errors into jobq's: ConnectionLost when the link broke, else TransportError."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise ConnectionLost(f"{what}: {_clean(exc)}") from exc
    except psycopg.Error as exc:
        raise TransportError(f"{what}: {_clean(exc)}") from exc


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
