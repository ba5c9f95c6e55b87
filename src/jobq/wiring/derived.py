"""What jobq derives from the settings to wire a process: pool sizes, buffers, prefetch,
the kinds with series of their own. Plain functions of Settings, read by the composition
root (container.py), the benchmarks and the fault suite, and unit tested on their own."""

from __future__ import annotations

import dataclasses

from jobq.config import Settings
from jobq.config.redaction import redact
from jobq.core.errors import ConfigError
from jobq.worker.sizing import CEILING as BUFFER_CEILING

LEASE_POOL = 4  # lease mode: claims, acks, heartbeats and releases share a few connections


def queue_settings(settings: Settings) -> list[Settings]:
    """One Settings per queue a consumer serves: each of ``consumer.queues`` with its own
    concurrency (a process of several queues runs a pool per queue), else ``queue`` alone."""
    if not settings.consumer.queues:
        return [settings]
    return [dataclasses.replace(settings, queue=queue, consumer=dataclasses.replace(
                settings.consumer, concurrency=concurrency, queues={}))
            for queue, concurrency in settings.consumer.queues.items()]


def transaction_mode(settings: Settings) -> bool:
    """True when jobs run inside the transaction that claimed them (postgres.claim: transaction)."""
    return settings.transport == "postgres" and settings.postgres.claim == "transaction"


def pg_pool_size(settings: Settings) -> int:
    """Connections the Postgres transport may use: ``postgres.pool_size``, or derived (0).

    Transaction mode holds one per running job, one for picks (and the depth gauge and the
    pause watch's look every second) and one spare: concurrency + 2. The transport warns at
    start-up when a configured size is below concurrency + 1. With ``postgres.retention`` set,
    one more: the pruner holds one for its round, which the claims, acks and heartbeats should
    not have to wait for.
    """
    if settings.postgres.pool_size:
        return settings.postgres.pool_size
    pruner = 1 if settings.postgres.retention.enabled else 0
    return pruner + (settings.consumer.concurrency + 2 if transaction_mode(settings)
                     else LEASE_POOL)


def pool_buffer(settings: Settings) -> int:
    """Deliveries held ready beyond the running ones.

    Zero in transaction mode: a buffered delivery would hold a connection, an open
    transaction and a row lock while it waits, so the pool claims only for a free worker.
    """
    return 0 if transaction_mode(settings) else settings.consumer.buffer_size


def pool_buffer_max(settings: Settings) -> int:
    """How far jobq may grow the buffer for short jobs (sizing.py): only in lease mode with
    ``consumer.buffer`` left to jobq (-1). A lease claim takes at most half of concurrency +
    buffer (the pool's next claim goes out while the workers run the last), so there the
    buffer sets the claim's batch size; RabbitMQ's prefetch is set once per session, and a
    configured buffer is kept as it is."""
    if settings.transport != "postgres" or transaction_mode(settings) or settings.consumer.buffer >= 0:
        return 0
    return max(BUFFER_CEILING, settings.consumer.buffer_size)


def rmq_prefetch(settings: Settings) -> int:
    """RabbitMQ prefetch: as configured, else what the pool holds (concurrency plus buffer)."""
    return settings.rabbitmq.prefetch or (settings.consumer.concurrency
                                          + settings.consumer.buffer_size)


def pool_drain_timeout(settings: Settings) -> float:
    """How long an idle --once pool's empty receive waits before "nothing left" is believed:
    a claim's empty answer is the truth; a RabbitMQ consumer waits for deliveries in flight."""
    if settings.transport != "rabbitmq":
        return 0.0
    from jobq.transports.rabbitmq.consumer import DRAIN_TIMEOUT
    return DRAIN_TIMEOUT


def metric_kinds(settings: Settings) -> list[str]:
    """The kinds with series of their own: ``metrics.kinds``, else ``consumer.processors``'."""
    return list(settings.metrics.kinds or settings.consumer.processors)


def server_address(settings: Settings) -> str:
    """``host:port`` of the configured backend's server (for messages: never a password)."""
    if settings.transport == "postgres":
        from jobq.transports.postgres.connect import server_address as pg_address

        return pg_address(settings.postgres.dsn)
    from jobq.transports.rabbitmq.connect import server_address as amqp_address

    return ", ".join(amqp_address(url) for url in settings.rabbitmq.urls or [settings.rabbitmq.url])


def backend_home(settings: Settings) -> str:
    """Which backend a queue lives on, password hidden: the server, database and schema, or
    the nodes, vhost and exchange (the dashboard asks each once for its queues)."""
    if settings.transport == "postgres":
        return f"{settings.postgres.safe_dsn}#{settings.postgres.schema}"
    nodes = ",".join(redact(url) for url in settings.rabbitmq.urls or [settings.rabbitmq.url])
    return f"{nodes}#{settings.rabbitmq.exchange}"


def schema_sql(settings: Settings) -> str:
    """The PostgreSQL migrations as SQL text (``jobq init --print-sql``), without connecting."""
    if settings.transport != "postgres":
        raise ConfigError("--print-sql shows the PostgreSQL migrations; RabbitMQ has no SQL "
                          "(`jobq init` prints the topology it declares)", key="--print-sql")
    from jobq.transports.postgres.admin import render_migrations

    return render_migrations(settings.postgres.schema)


def loop_stale_after(settings: Settings) -> float:
    """Seconds of a blocked event loop after which ``/healthz`` fails: half of what the server
    allows a silent consumer before it takes its jobs away (a lease in lease mode, the network
    deadline in transaction mode, the AMQP heartbeat on RabbitMQ), so an orchestrator hears of
    it before the jobs are lost; never under 2 s (the beat that shows the loop is alive comes
    once a second)."""
    if settings.transport == "rabbitmq":
        allowed = float(settings.rabbitmq.heartbeat or 60)
    elif transaction_mode(settings):
        allowed = settings.postgres.network_deadline
    else:
        allowed = settings.postgres.lease
    return max(2.0, allowed / 2)


def loop_block_threshold(settings: Settings) -> float:
    """Seconds of a blocked event loop after which the watchdog logs the job that blocks it:
    1 s, or less when ``/healthz`` would fail sooner."""
    return min(1.0, loop_stale_after(settings) / 2)
