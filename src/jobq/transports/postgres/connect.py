"""PostgreSQL connections: open with retries and backoff, translate driver errors at the boundary."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobq.config import ConnectConfig, redact
from jobq.core.errors import ConnectionLost
from jobq.core.within import Patience
from jobq.transports import common
from jobq.transports.common import error_text as _clean  # the name the connect loops use
from jobq.transports.postgres.refusals import refusal, unparsable

# A server that answers read-only (SQLSTATE 25006) is a standby now (a failover, or a DSN
# that reached the wrong host): like a lost link, the work goes to a new connection, which
# target_session_attrs=read-write in a multi-host DSN sends to the writable server.
READ_ONLY: common.Errors = (psycopg.errors.ReadOnlySqlTransaction,)
# What "the link to the server broke" looks like from psycopg; any other psycopg.Error failed
# the statement only. (Admin shutdown and "cannot connect now" are OperationalErrors.)
LINK_ERRORS: common.Errors = (psycopg.OperationalError, psycopg.InterfaceError, *READ_ONLY)
# After a statement's deadline psycopg asks the server to cancel it and waits for the answer
# (5 s + 5 s at most, its own constants); a dead link would answer neither, so after this
# grace the wait is interrupted again and psycopg closes the connection.
# Runs a named statement with its parameters and returns its rows (admin.pool_fetch).
Fetch = Callable[[str, dict[str, Any]], Awaitable[Sequence[Sequence[Any]]]]
CANCEL_GRACE = 1.0

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Pool = AsyncConnectionPool[Conn]


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


def network_params(dsn: str, network_timeout: float) -> dict[str, Any]:
    """libpq parameters that bound how long either end waits on a silent link.

    Client side: TCP keepalives (idle, then probes, about ``network_timeout`` in all) and
    tcp_user_timeout (unacknowledged data). Server side, through ``options``: the same for the
    backend's socket, so a server whose client vanished (a partition) closes the session and
    rolls back its transaction, releasing its row locks, within about ``network_timeout``.
    Keys the DSN sets itself are kept; its ``options`` come after ours, so they win.
    """
    given = conninfo.conninfo_to_dict(dsn)
    seconds = max(1, round(network_timeout))
    idle, interval, count = max(1, seconds // 2), max(1, seconds // 6), 3
    client = {"keepalives": 1, "keepalives_idle": idle, "keepalives_interval": interval,
              "keepalives_count": count, "tcp_user_timeout": seconds * 1000}
    params: dict[str, Any] = {k: v for k, v in client.items() if k not in given}
    server = (f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
              f"-c tcp_keepalives_count={count} -c tcp_user_timeout={seconds * 1000}")
    params["options"] = f"{server} {given['options']}" if given.get("options") else server
    return params


@contextlib.asynccontextmanager
async def deadline(what: str, seconds: float) -> AsyncIterator[None]:
    """ConnectionLost if the body has not finished within ``seconds`` (+ CANCEL_GRACE at most).

    The body is cancelled at the deadline, and again CANCEL_GRACE later if psycopg is still
    waiting for the server to confirm the cancel; a cancellation from outside passes through.
    """
    task = asyncio.current_task()
    assert task is not None
    before = task.cancelling()
    fired = 0

    def fire() -> None:
        nonlocal fired
        fired += 1
        task.cancel()
        if fired == 1:  # again CANCEL_GRACE later, counted from this one (not in its turn)
            timers.append(Patience(CANCEL_GRACE, fire))

    timers = [Patience(seconds, fire)]
    try:
        yield
    except asyncio.CancelledError as exc:
        for timer in timers:
            timer.cancel()
        for _ in range(fired):
            task.uncancel()
        if fired and task.cancelling() <= before:
            raise ConnectionLost(f"{what}: no answer from PostgreSQL within {seconds:g}s "
                                 "(postgres.network_timeout); dropping the connection") from exc
        raise
    finally:
        for timer in timers:
            timer.cancel()


def hung_up(conn: Conn) -> bool:
    """True when the server already ended this idle connection: closed, or its socket readable
    while no statement is in flight (a pool connection listens to nothing, so what arrives
    unasked is the server's goodbye: pg_terminate_backend, idle_session_timeout, a restart).
    One non-blocking poll of the socket (poll, not select: any descriptor number), no round
    trip. Not knowing (an unexpected error) counts as alive: the work then finds out."""
    if conn.closed or conn.broken:
        return True
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return False


async def live(pool: Pool, timeout: float | None = None) -> Conn:
    """A connection from the pool that the server has not hung up on. Those it has are closed
    and handed back (the pool opens new ones in their place) instead of failing the unit of
    work that would have used them; ``timeout`` bounds the whole wait (PoolTimeout).
    Not psycopg_pool's ``check=``: a round trip per use, and after a failed check it waits 1 s,
    then 2 s..., so a pool whose every connection was cut at once stalls for seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + (pool.timeout if timeout is None else timeout)
    while True:
        conn = await pool.getconn(timeout=max(0.001, end - loop.time()))
        if not hung_up(conn):
            return conn
        await conn.close()
        await pool.putconn(conn)


@contextlib.asynccontextmanager
async def taken(pool: Pool, timeout: float | None = None) -> AsyncIterator[Conn]:
    """``pool.connection()``, with ``live``'s check: a connection the server ended is not used."""
    conn = await live(pool, timeout)
    try:
        yield conn
    finally:
        await pool.putconn(conn)


@contextlib.asynccontextmanager
async def pooled(pool: Pool, what: str, seconds: float) -> AsyncIterator[Conn]:
    """A pool connection for one unit of work that must end within ``seconds``, errors
    translated; a connection that answered read-only is closed, so the pool replaces it."""
    with translated(what):
        conn = await live(pool, seconds)
        try:
            async with deadline(what, seconds):
                try:
                    yield conn
                except READ_ONLY:
                    await conn.close()
                    raise
        finally:
            await pool.putconn(conn)


async def connect_once(dsn: str, connect: ConnectConfig, log: logging.Logger, *,
                       network_timeout: float) -> Conn:
    """One autocommit connection, retried with backoff; ConnectionLost naming host:port at the end.

    Refused at the first answer that retrying cannot change (a wrong role, database, password
    or DSN option: refusals.py): not retried, whatever ``connect.attempts`` says.
    """
    where = server_address(dsn)
    try:
        params = network_params(dsn, network_timeout)
    except psycopg.ProgrammingError as exc:
        raise unparsable(exc) from exc
    async for attempt in connect.backoff().attempts(connect.attempts):
        try:
            return await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, connect_timeout=max(1, round(connect.timeout)), **params
            )
        except psycopg.Error as exc:
            refused = refusal(exc, where, dsn)
            if refused is not None:
                raise refused from exc
            if attempt.last:
                raise ConnectionLost(
                    f"cannot reach PostgreSQL at {where} after {attempt.number} attempts: {_clean(exc)}"
                ) from exc
            log.warning("cannot reach PostgreSQL at %s (attempt %s): %s; retrying in %.1fs",
                        where, attempt, _clean(exc), attempt.delay)
    raise AssertionError("unreachable")


async def plan_by_index(conn: Conn) -> None:
    """Each pool connection plans with ``enable_seqscan = off``: every statement jobq runs on
    the jobs table is meant to walk an index, and this keeps it so after the table grows.

    psycopg prepares a statement at its sixth run, and PostgreSQL then keeps a generic plan
    made for the table as it was. For a new queue's few rows that plan joined the claim's
    picked ids to the table by a sequential scan, and kept doing it: with autovacuum off no
    ANALYZE came to replan it, and a claim took 0.40 ms at the start of a 5,000-job run and
    1.03 ms at its end (0.28 and 0.33 ms with this). A table with no usable index is still
    scanned (the setting only makes a scan the last resort).
    """
    await conn.execute("SET enable_seqscan = off")


async def open_pool(
    dsn: str, connect: ConnectConfig, size: int, log: logging.Logger, *, network_timeout: float,
    min_size: int | None = None,
) -> Pool:
    """An open pool of up to ``size`` autocommit connections (``min_size`` of them opened now,
    default all), the server checked reachable; every connection with ``network_params``."""
    probe = await connect_once(dsn, connect, log, network_timeout=network_timeout)
    await probe.close()
    pool: Pool = AsyncConnectionPool(
        dsn,
        min_size=size if min_size is None else min_size,
        max_size=size,
        open=False,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(connect.timeout)),
                **network_params(dsn, network_timeout)},
        timeout=max(connect.timeout, 30.0),
        reconnect_timeout=connect.backoff_max * connect.attempts,
        name="jobq",
        configure=plan_by_index,
    )
    try:
        await pool.open(wait=True, timeout=connect.timeout * connect.attempts)
    except BaseException as exc:
        # Cancelled too (SIGTERM during start-up): left open, the pool's workers go on trying
        # to connect, and the event loop's closing wait for them outlasts the shutdown.
        await pool.close()
        if not isinstance(exc, Exception):
            raise
        raise ConnectionLost(f"cannot open a pool to PostgreSQL at {server_address(dsn)}: "
                             f"{_clean(exc)}") from exc
    log.info("connected to PostgreSQL at %s (pool of %d)", redact(server_address(dsn)), size)
    return pool
