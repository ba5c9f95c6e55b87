"""LISTEN for new jobs on a connection of its own, reconnecting forever with backoff."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from jobq.backoff import Backoff, pause
from jobq.config import ConnectConfig
from jobq.errors import TransportError, describe
from jobq.transports.postgres.connect import connect_once


async def listen(dsn: str, connect: ConnectConfig, channel: str, queue: str, wake: Callable[[], None],
                 log: logging.Logger, on_reconnect: Callable[[], None] | None = None) -> None:
    """Call ``wake`` on each notification for ``queue``, and after every (re)connect; never returns.

    ``on_reconnect`` is called each time the connection is back after a loss (for metrics).
    """
    backoff = Backoff.from_connect(connect)
    failures = 0  # since the last LISTEN that went through
    statement = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
    while True:
        try:
            conn = await connect_once(dsn, connect, log)
            async with conn:
                await conn.execute(statement)
                if failures and on_reconnect is not None:
                    on_reconnect()
                failures = 0
                wake()  # a notification may have been missed while away
                async for note in conn.notifies():
                    if note.payload == queue:
                        wake()
        except (psycopg.Error, TransportError) as exc:
            failures += 1
            delay = backoff.delay(failures)
            log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", describe(exc), delay)
            await pause(delay)
