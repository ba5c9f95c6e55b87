"""Starting a consumer against a server that may drop a connection at any moment."""

from __future__ import annotations

import asyncio
import logging

from jobq.config import ConnectConfig
from jobq.errors import ConnectionLost, describe
from jobq.retry import RetryPolicy
from jobq.transport import Transport


async def open_transport(transport: Transport, connect: ConnectConfig, log: logging.Logger) -> None:
    """``transport.open()``, tried again with backoff (``connect``) when a connection drops meanwhile.

    Connecting is already retried; this covers a connection cut between connecting and
    consuming (a server restart, pg_terminate_backend), which used to end the consumer with
    exit 3 at once although the server was there. After ``connect.attempts`` tries the error
    stands (exit 3). Every transport's ``open`` starts its background work only once the
    statements that can fail have run, so trying again is safe.
    """
    policy = RetryPolicy(base_delay=connect.backoff_base, max_delay=connect.backoff_max)
    for attempt in range(1, connect.attempts + 1):
        try:
            await transport.open()
            return
        except ConnectionLost as exc:
            if attempt == connect.attempts:
                raise
            delay = policy.backoff(attempt)
            log.warning("could not start consuming (%s; attempt %d/%d); retrying in %.1fs",
                        describe(exc), attempt, connect.attempts, delay)
            await asyncio.sleep(delay)
