"""LISTEN for new jobs on a connection of its own, reconnecting forever with backoff."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from jobq.config import ConnectConfig
from jobq.core.backoff import pause
from jobq.core.errors import TransportError, describe
from jobq.transports.postgres.connect import connect_once, deadline


async def listen(dsn: str, connect: ConnectConfig, channel: str, queue: str, wake: Callable[[], None],
                 log: logging.Logger, on_reconnect: Callable[[], None] | None = None, *,
                 network_timeout: float) -> None:
    """Call ``wake`` on each notification for ``queue``, and after every (re)connect; never returns.

    ``on_reconnect`` is called each time the connection is back after a loss (for metrics).
    A connection silent for ``network_timeout`` is pinged (an empty query, bounded by the same
    deadline): a link that went dark is noticed within about twice that, not when TCP gives up.
    """
    backoff = connect.backoff()
    failures = 0  # since the last LISTEN that went through
    statement = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
    while True:
        try:
            conn = await connect_once(dsn, connect, log, network_timeout=network_timeout)
            async with conn:
                async with deadline("postgres LISTEN", network_timeout):
                    await conn.execute(statement)
                if failures and on_reconnect is not None:
                    on_reconnect()
                failures = 0
                wake()  # a notification may have been missed while away
                while True:
                    async for note in conn.notifies(timeout=network_timeout):
                        if note.payload == queue:
                            wake()
                    async with deadline("postgres LISTEN ping", network_timeout):
                        await conn.execute("")
        except (psycopg.Error, TransportError) as exc:
            failures += 1
            delay = backoff.delay(failures)
            log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", describe(exc), delay)
            await pause(delay)
