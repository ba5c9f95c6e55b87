"""The composition root: the only module that knows dependency-injector and wires objects.

``transport``, ``publisher`` and ``admin`` are Selectors on ``settings.transport``; a backend
plugs in by adding its providers here, without touching the pool or the processor.
Connection pools are async Resources: opened on first use (with retries), closed by
``shutdown_resources``. Each backend's modules are imported when first used (``lazy``): a
Postgres process never imports aio-pika, a RabbitMQ one never imports psycopg, which is a
third of a command's start-up time.

The rest of jobq gets its objects through the typed functions at the end (``get_transport``
...), never from the providers, whose values are untyped; ``_conforming`` makes mypy check
every implementation against the Protocol those functions promise.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar
from wsgiref.simple_server import WSGIServer

from dependency_injector import containers, providers

from jobq.config import Settings
from jobq.core.errors import ConfigError
from jobq.core.port import Admin, Publisher, Transport
from jobq.feeds.relay import Outbox
from jobq.feeds.schedules import Schedule, Ticks, parse_schedules
from jobq.observability.metrics import Metrics
from jobq.observability.monitor import Monitor
from jobq.observability.scraping import Scrape
from jobq.wiring.derived import (
    LEASE_POOL,
    metric_kinds,
    pg_pool_size,
    pool_buffer,
    pool_buffer_max,
    pool_drain_timeout,
    rmq_prefetch,
)
from jobq.wiring.handling import app_middleware, handler, retry_policy, serving
from jobq.wiring.lazy import lazy
from jobq.wiring.observing import job_tracing, metrics_server, monitor, observer
from jobq.worker.pausing import PauseWatch
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from jobq.worker.routing import task_source
from jobq.worker.threads import HandlerThreads

if TYPE_CHECKING:
    from jobq.transports.memory import MemoryPublisher, MemoryTransport
    from jobq.transports.postgres.admin import PostgresAdmin
    from jobq.transports.postgres.lease import PostgresTransport
    from jobq.transports.postgres.outbox import PostgresOutbox
    from jobq.transports.postgres.publisher import PostgresPublisher
    from jobq.transports.postgres.ticks import PostgresTicks
    from jobq.transports.postgres.transaction import PgTransactionTransport
    from jobq.transports.rabbitmq.admin import RabbitAdmin
    from jobq.transports.rabbitmq.connect import RabbitLink
    from jobq.transports.rabbitmq.consumer import RabbitTransport
    from jobq.transports.rabbitmq.publisher import RabbitPublisher
    from jobq.transports.rabbitmq.ticks import RabbitTicks

T = TypeVar("T")


async def pg_pool(settings: Settings, logger: logging.Logger) -> AsyncIterator[Any]:
    """Open the psycopg pool (retrying an unreachable server), close it at shutdown.

    It starts with at most LEASE_POOL connections (a producer or `jobq` needs no more); a
    transaction-mode consumer opens the rest when it starts.
    """
    from jobq.transports.postgres.connect import open_pool

    size = pg_pool_size(settings)
    pool = await open_pool(settings.postgres.dsn, settings.connect, size, logger,
                           network_timeout=settings.postgres.network_deadline,
                           min_size=min(size, LEASE_POOL))
    try:
        yield pool
    finally:
        await pool.close()


async def rmq_link(settings: Settings, logger: logging.Logger, role: str = ""
                   ) -> AsyncIterator[RabbitLink]:
    """Connect to RabbitMQ (retrying an unreachable broker), close at shutdown.

    ``role`` names a second connection of the process (the consumer's copies) in its
    connection_name, after the queue.
    """
    from jobq.transports.rabbitmq.connect import RabbitLink

    link = RabbitLink(settings.rabbitmq.connect_urls, settings.connect,
                      role=f"{settings.queue} {role}".strip(), logger=logger,
                      heartbeat=settings.rabbitmq.heartbeat)
    try:  # an open cancelled at start-up (SIGTERM) closes what it had opened too
        await link.open()
        yield link
    finally:
        await link.close()


class Container(containers.DeclarativeContainer):
    """Wires a jobq process from its Settings."""

    settings = providers.Dependency(instance_of=Settings)
    logger = providers.Callable(logging.getLogger, "jobq")
    cfg = settings.provided

    pg_pool = providers.Resource(pg_pool, settings=settings, logger=logger)
    rmq_link = providers.Resource(rmq_link, settings=settings,
                                  logger=providers.Callable(logging.getLogger, "jobq.rabbitmq"))
    # The consumer's copies publish on a connection of their own: a broker that blocks
    # publishing (a resource alarm) then never blocks the consuming connection and its acks.
    rmq_copies_link = providers.Resource(rmq_link, settings=settings, role="copies",
                                         logger=providers.Callable(logging.getLogger,
                                                                   "jobq.rabbitmq"))
    # transport: memory (tests): the jobs of this container, in its process; nothing to connect
    memory_store = providers.Singleton(lazy("jobq.transports.memory:MemoryStore"))
    backend = providers.Selector(cfg.transport, postgres=pg_pool, rabbitmq=rmq_link,
                                 memory=memory_store)
    transport_links = providers.Selector(cfg.transport, postgres=providers.Object(None),
                                         rabbitmq=rmq_copies_link, memory=providers.Object(None))
    # postgres.retention, carried out by the consumers (both claim modes) and `jobq prune`
    pg_pruner = providers.Singleton(
        lazy("jobq.transports.postgres.retention:Pruner"), pool=pg_pool, settings=cfg.postgres,
        queue=cfg.queue, logger=providers.Callable(logging.getLogger, "jobq.postgres"))

    transport = providers.Selector(
        cfg.transport,
        postgres=providers.Selector(
            cfg.postgres.claim,
            lease=providers.Singleton(
                lazy("jobq.transports.postgres.lease:PostgresTransport"),
                pool=pg_pool, settings=cfg.postgres, connect=cfg.connect, queue=cfg.queue,
                logger=providers.Callable(logging.getLogger, "jobq.postgres"), limits=cfg.limits,
                pruner=pg_pruner,
            ),
            transaction=providers.Singleton(
                lazy("jobq.transports.postgres.transaction:PgTransactionTransport"),
                pool=pg_pool, settings=cfg.postgres, connect=cfg.connect, queue=cfg.queue,
                concurrency=cfg.consumer.concurrency, once=cfg.consumer.once,
                logger=providers.Callable(logging.getLogger, "jobq.postgres"), limits=cfg.limits,
                max_attempts=cfg.retry.max_attempts, pruner=pg_pruner,
            ),
        ),
        rabbitmq=providers.Singleton(
            lazy("jobq.transports.rabbitmq.consumer:RabbitTransport"),
            link=rmq_link, settings=cfg.rabbitmq, queue=cfg.queue,
            prefetch=providers.Callable(rmq_prefetch, settings), max_attempts=cfg.retry.max_attempts,
            logger=providers.Callable(logging.getLogger, "jobq.rabbitmq"), limits=cfg.limits,
            publish_link=rmq_copies_link,
            job_timeout=cfg.consumer.job_timeout, concurrency=cfg.consumer.concurrency,
        ),
        memory=providers.Singleton(lazy("jobq.transports.memory:MemoryTransport"),
                                   memory_store, queue=cfg.queue),
    )
    publisher = providers.Selector(
        cfg.transport,
        postgres=providers.Singleton(
            lazy("jobq.transports.postgres.publisher:PostgresPublisher"),
            pool=pg_pool, settings=cfg.postgres, queue=cfg.queue,
            max_attempts=cfg.retry.max_attempts, limits=cfg.limits,
        ),
        rabbitmq=providers.Singleton(
            lazy("jobq.transports.rabbitmq.publisher:RabbitPublisher"),
            link=rmq_link, settings=cfg.rabbitmq, queue=cfg.queue,
            max_attempts=cfg.retry.max_attempts, limits=cfg.limits,
        ),
        memory=providers.Singleton(lazy("jobq.transports.memory:MemoryPublisher"), memory_store,
                                   max_attempts=cfg.retry.max_attempts),
    )
    admin = providers.Selector(
        cfg.transport,
        postgres=providers.Singleton(lazy("jobq.transports.postgres.admin:PostgresAdmin"),
                                     pool=pg_pool, settings=cfg.postgres, queue=cfg.queue,
                                     pruner=pg_pruner),
        rabbitmq=providers.Singleton(lazy("jobq.transports.rabbitmq.admin:RabbitAdmin"),
                                     link=rmq_link, settings=cfg.rabbitmq, queue=cfg.queue,
                                     max_pending=cfg.limits.max_pending,
                                     rabbitmq_api=cfg.dashboard.rabbitmq_api),
    )

    # Schedules on RabbitMQ get a connection of their own: the lock (an exclusive queue) is
    # held by a connection, and a blocked or cut-off publish must not touch the consumer's.
    rmq_ticks_link = providers.Resource(rmq_link, settings=settings, role="schedules",
                                        logger=providers.Callable(logging.getLogger,
                                                                  "jobq.rabbitmq"))
    ticks = providers.Selector(
        cfg.transport,
        postgres=providers.Singleton(lazy("jobq.transports.postgres.ticks:PostgresTicks"),
                                     pool=pg_pool, settings=cfg.postgres, publisher=publisher,
                                     queue=cfg.queue),
        rabbitmq=providers.Singleton(
            lazy("jobq.transports.rabbitmq.ticks:RabbitTicks"), link=rmq_ticks_link,
            settings=cfg.rabbitmq, queue=cfg.queue,
            publisher=providers.Singleton(
                lazy("jobq.transports.rabbitmq.publisher:RabbitPublisher"),
                link=rmq_ticks_link, settings=cfg.rabbitmq, queue=cfg.queue,
                max_attempts=cfg.retry.max_attempts, limits=cfg.limits)),
    )

    # `jobq relay`: the PostgreSQL queue as an outbox, published to RabbitMQ, whatever
    # `transport` says (both backends in one process: the one command that has them).
    pg_outbox = providers.Singleton(
        lazy("jobq.transports.postgres.outbox:PostgresOutbox"), pool=pg_pool,
        settings=cfg.postgres, connect=cfg.connect, queue=cfg.queue,
        logger=providers.Callable(logging.getLogger, "jobq.relay"))
    relay_publisher = providers.Singleton(
        lazy("jobq.transports.rabbitmq.publisher:RabbitPublisher"), link=rmq_link,
        settings=cfg.rabbitmq, queue=cfg.queue, max_attempts=cfg.retry.max_attempts,
        limits=cfg.limits)

    # `jobq move`: both backends, as for the relay.
    pg_moves = providers.Singleton(
        lazy("jobq.transports.postgres.moves:PostgresMoves"), pool=pg_pool, settings=cfg.postgres,
        queue=cfg.queue, logger=providers.Callable(logging.getLogger, "jobq.move"))
    rmq_moves = providers.Singleton(
        lazy("jobq.transports.rabbitmq.moves:RabbitMoves"), link=rmq_link, settings=cfg.rabbitmq,
        queue=cfg.queue, max_attempts=cfg.retry.max_attempts, limits=cfg.limits,
        logger=providers.Callable(logging.getLogger, "jobq.move"))

    metrics = providers.Singleton(Metrics, transport=cfg.transport, queue=cfg.queue,
                                  kinds=providers.Callable(metric_kinds, settings))
    config_policy = providers.Singleton(RetryPolicy, base_delay=cfg.retry.base_delay,
                                        max_delay=cfg.retry.max_delay, jitter=cfg.retry.jitter)
    # Every consumer asks its admin whether the queue is paused, about every second (memory:
    # no admin, never paused).
    watching = providers.Singleton(PauseWatch, probe=admin.provided.paused,
                                   logger=providers.Callable(logging.getLogger, "jobq.pause"))
    pause_watch = providers.Selector(cfg.transport, postgres=watching, rabbitmq=watching,
                                     memory=providers.Object(None))
    # Plain-def handlers' threads: one per worker, owned (and shut down) by the pool.
    handler_threads = providers.Singleton(HandlerThreads, cfg.consumer.concurrency)
    tracing = providers.Singleton(job_tracing, settings=settings)
    app = providers.Singleton(task_source, cfg.consumer)  # consumer.app's jobq.App, or None
    middleware = providers.Singleton(app_middleware, app)  # the app's, its failure hooks first
    policy = providers.Singleton(retry_policy, config_policy, app)  # tasks' own backoff too
    worker_pool = providers.Singleton(
        WorkerPool,
        transport=transport,
        handler=providers.Callable(handler, settings, handler_threads, tracing, app, middleware),
        policy=policy,
        concurrency=cfg.consumer.concurrency,
        buffer_size=providers.Callable(pool_buffer, settings),
        buffer_max=providers.Callable(pool_buffer_max, settings),
        job_timeout=cfg.consumer.job_timeout,
        shutdown_timeout=cfg.consumer.shutdown_timeout,
        poll_timeout=cfg.postgres.poll_interval,
        drain_timeout=providers.Callable(pool_drain_timeout, settings),
        once=cfg.consumer.once,
        stall_timeout=cfg.consumer.stall_timeout,
        threads=handler_threads,
        observer=providers.Callable(observer, metrics, tracing, middleware),
        logger=providers.Callable(logging.getLogger, "jobq.pool"),
        pause=pause_watch,
    )
    scrape = providers.Singleton(Scrape, metrics)  # what the server shows: other queues join
    metrics_server = providers.Resource(metrics_server, settings=settings, scrape=scrape)
    monitor = providers.Singleton(monitor, settings=settings, pool=worker_pool,
                                  transport=transport, metrics=metrics, admin=admin)
    schedules = providers.Callable(parse_schedules, cfg.schedules)


async def resolve(provided: T | Awaitable[T]) -> T:
    """A provider's value: async Resources make dependency-injector return an awaitable."""
    return await provided if inspect.isawaitable(provided) else provided


async def connect(container: Container) -> None:
    """Open the configured backend's connection (pool or link), retrying an unreachable server.

    The accessors below call it first, so that a start-up abandoned while the server is being
    retried cancels the connecting itself: the Resource's own task, which dependency-injector
    then forgets (nothing to shut down). Cancelled instead while a provider that depends on the
    Resource waits for it, dependency-injector's callbacks go on to set results on cancelled
    futures and print tracebacks, and ``shutdown_resources`` waits out every retry.
    """
    await resolve(container.backend())


async def get_transport(container: Container) -> Transport:
    """The configured transport (not yet opened)."""
    await connect(container)
    await resolve(container.transport_links())  # opened here, for the reason given in connect
    transport: Transport = await resolve(container.transport())
    return transport


async def get_publisher(container: Container) -> Publisher:
    """The configured publisher (not yet opened); with tracing on, its enqueues open spans and
    carry their context in the jobs' headers (jobq.observability.tracing)."""
    await connect(container)
    publisher: Publisher = await resolve(container.publisher())
    settings: Settings = container.settings()
    if settings.tracing.enabled:
        from jobq.observability.tracing import TracedPublisher

        return TracedPublisher(publisher, system=settings.transport, queue=settings.queue)
    return publisher


async def get_admin(container: Container) -> Admin:
    """The configured backend's admin (none for ``transport: memory``: a ConfigError)."""
    if container.settings().transport == "memory":
        raise ConfigError("transport 'memory' has no admin: a test reads its jobs through "
                          "jobq.testing", key="transport")
    await connect(container)
    admin: Admin = await resolve(container.admin())
    return admin


async def get_worker_pool(container: Container) -> WorkerPool:
    """The worker pool over the configured transport."""
    await connect(container)
    await resolve(container.transport_links())
    pool: WorkerPool = await resolve(container.worker_pool())
    return pool


async def get_observers(container: Container, *, serving: bool = True
                        ) -> tuple[Metrics, WSGIServer | None, Monitor]:
    """The consumer's metrics (watching its pool and transport), their HTTP server if
    ``metrics.enabled`` and ``serving`` (serving from now on, stopped with the container; a
    process's other queues are shown by its first one's: ``show_metrics``) and its monitor."""
    await connect(container)
    watching: Monitor = await resolve(container.monitor())
    server: WSGIServer | None = await resolve(container.metrics_server()) if serving else None
    return get_metrics(container), server, watching


def show_metrics(container: Container, metrics: Metrics) -> None:
    """Show ``metrics`` (another queue's of the process) on ``container``'s server too."""
    scrape: Scrape = container.scrape()
    scrape.add(metrics)


def app_serving(container: Container) -> contextlib.AbstractAsyncContextManager[None]:
    """The start-up and shutdown hooks of ``consumer.app`` around a block (none without one)."""
    return serving(container.app())


def get_schedules(container: Container) -> tuple[Schedule, ...]:
    """The configured schedules (``schedules:``), checked."""
    schedules: tuple[Schedule, ...] = container.schedules()
    return schedules


async def get_ticks(container: Container) -> Ticks:
    """The configured backend's record of fired schedule ticks, opened (grants checked)."""
    await connect(container)
    ticks: Ticks = await resolve(container.ticks())
    await ticks.open()
    return ticks


@contextlib.asynccontextmanager
async def admin_of(settings: Settings) -> AsyncIterator[Admin]:
    """The backend's admin for ``settings``, its connection closed on the way out (the
    dashboard opens one per queue it shows, and again after a failure)."""
    container = Container(settings=settings)
    try:
        yield await get_admin(container)
    finally:
        closing = container.shutdown_resources()
        if inspect.isawaitable(closing):
            await closing


def get_metrics(container: Container) -> Metrics:
    """The process's metrics (the pool's observer)."""
    metrics: Metrics = container.metrics()
    return metrics


if TYPE_CHECKING:
    def _conforming(lease: PostgresTransport, transaction: PgTransactionTransport,
                    rabbit: RabbitTransport, memory: MemoryTransport, pg_publisher: PostgresPublisher,
                    rabbit_publisher: RabbitPublisher, memory_publisher: MemoryPublisher,
                    pg_admin: PostgresAdmin, rabbit_admin: RabbitAdmin, outbox: PostgresOutbox
                    ) -> tuple[list[Transport], list[Publisher], list[Admin], Outbox]:
        """Never called: mypy checks here that each implementation conforms to its Protocol."""
        return ([lease, transaction, rabbit, memory], [pg_publisher, rabbit_publisher, memory_publisher],
                [pg_admin, rabbit_admin], outbox)

    def _ticking(pg_ticks: PostgresTicks, rabbit_ticks: RabbitTicks) -> list[Ticks]:
        """Never called: mypy checks that both records of ticks conform to Ticks."""
        return [pg_ticks, rabbit_ticks]
