"""Removes what one native stack run created on the shared servers, and nothing else."""

from __future__ import annotations

import asyncio
import subprocess

import aio_pika
import psycopg
from psycopg import sql


def drop_schema(dsn: str, schema: str) -> None:
    """Drop the run's own schema (its name is unique to the run)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def broker_names(kind: str) -> list[str]:
    """Queue or exchange names on the local broker's default vhost, via rabbitmqctl."""
    done = subprocess.run(["rabbitmqctl", f"list_{kind}", "--quiet", "--no-table-headers", "name"],
                          capture_output=True, text=True, timeout=60, check=True)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def owned(names: list[str], prefix: str) -> list[str]:
    """The names that belong to the run: ``prefix`` itself or ``prefix.<anything>``."""
    return [n for n in names if n == prefix or n.startswith(prefix + ".")]


async def _delete(url: str, queues: list[str], exchanges: list[str]) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        for exchange in exchanges:
            await channel.exchange_delete(exchange)


def drop_rabbit(url: str, prefix: str) -> list[str]:
    """Delete the run's queues and exchanges (named ``prefix`` or ``prefix.*``); return them.

    AMQP cannot list queues, so the names come from rabbitmqctl: the native stack only ever
    runs beside its broker.
    """
    queues, exchanges = owned(broker_names("queues"), prefix), owned(broker_names("exchanges"), prefix)
    if queues or exchanges:
        asyncio.run(_delete(url, queues, exchanges))
    return queues + exchanges
