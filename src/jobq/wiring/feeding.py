"""The two commands that wire both backends in one process: ``jobq relay`` and ``jobq move``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from jobq.config import Settings
from jobq.feeds.move import Sink, Source
from jobq.feeds.relay import Relay
from jobq.wiring.container import Container, resolve

if TYPE_CHECKING:
    from jobq.transports.postgres.moves import PostgresMoves
    from jobq.transports.postgres.outbox import PostgresOutbox
    from jobq.transports.rabbitmq.moves import RabbitMoves
    from jobq.transports.rabbitmq.publisher import RabbitPublisher


@contextlib.asynccontextmanager
async def relaying(container: Container, batch: int) -> AsyncIterator[Relay]:
    """A relay from the PostgreSQL queue to RabbitMQ, both opened (grants checked, topology
    declared), closed on the way out. With ``postgres.retention`` the relay prunes the queue's
    done rows (the relayed jobs), as a consumer would: no consumer runs on a relayed queue."""
    from jobq.transports.postgres.retention import start

    await resolve(container.pg_pool())
    await resolve(container.rmq_link())
    outbox: PostgresOutbox = await resolve(container.pg_outbox())
    publisher: RabbitPublisher = await resolve(container.relay_publisher())
    settings: Settings = container.settings()
    await outbox.open()
    pruning = start(await resolve(container.pg_pruner()))
    try:
        await publisher.open()
        try:
            yield Relay(outbox, publisher.publish_valid, batch=batch,
                        backoff=settings.connect.backoff(),
                        logger=logging.getLogger("jobq.relay"))
        finally:
            await publisher.close()
    finally:
        for task in pruning:
            task.cancel()
        await asyncio.gather(*pruning, return_exceptions=True)
        await outbox.close()


@contextlib.asynccontextmanager
async def moving(container: Container, source: str) -> AsyncIterator[tuple[Source, Sink]]:
    """The two backends of ``jobq move``, opened (grants checked, topology declared):
    ``source`` ("postgres" or "rabbitmq") and the other one."""
    await resolve(container.pg_pool())
    await resolve(container.rmq_link())
    pg: PostgresMoves = await resolve(container.pg_moves())
    rabbit: RabbitMoves = await resolve(container.rmq_moves())
    await pg.open()
    await rabbit.open()
    yield (pg, rabbit) if source == "postgres" else (rabbit, pg)
