"""Starting a consumer against a server that may drop a connection at any moment."""

from __future__ import annotations

import logging

from jobq.config import ConnectConfig
from jobq.core.errors import ConnectionLost, Refused, describe
from jobq.core.port import Transport


async def open_transport(transport: Transport, connect: ConnectConfig, log: logging.Logger) -> None:
    """``transport.open()``, tried again with backoff (``connect``) when a connection drops meanwhile.

    Connecting is already retried; this covers a connection cut between connecting and
    consuming (a server restart, pg_terminate_backend), which used to end the consumer with
    exit 3 at once although the server was there. After ``connect.attempts`` tries the error
    stands (exit 3). Every transport's ``open`` starts its background work only once the
    statements that can fail have run, so trying again is safe.
    """
    async for attempt in connect.backoff().attempts(connect.attempts):
        try:
            await transport.open()
            return
        except ConnectionLost as exc:
            if attempt.last or isinstance(exc, Refused):  # a mistake is not mended by waiting
                raise
            log.warning("could not start consuming (%s; attempt %s); retrying in %.1fs",
                        describe(exc), attempt, attempt.delay)
