"""``enqueue``: a job that commits with Django's transaction (PostgreSQL), or is published once
it has committed (RabbitMQ)."""

from __future__ import annotations

from typing import Any, TypeVar, overload

import psycopg
from django.db import connections, transaction
from psycopg.pq import TransactionStatus

from jobq.contrib.django.apps import jobq_config
from jobq.core.errors import ConfigError
from jobq.core.port import NewJob
from jobq.tasks import Task
from jobq.transports.postgres import enqueue_sync

A = TypeVar("A")


@overload
def enqueue(task: Task[A], args: A, /, *, queue: str | None = None,
            using: str | None = None) -> str | None: ...


@overload
def enqueue(job: NewJob, /, *, queue: str | None = None, using: str | None = None) -> str | None: ...


def enqueue(what: Task[Any] | NewJob, args: Any = None, /, *, queue: str | None = None,
            using: str | None = None) -> str | None:
    """Enqueue a task's job (``enqueue(send_receipt, Receipt(...))``) or a ``NewJob``, bound to
    the transaction of Django database ``using`` (default ``JOBQ['DATABASE']``).

    On PostgreSQL the job is written on Django's own connection: inside ``transaction.atomic()``
    it commits or rolls back with the block; outside one it is committed at once. That
    database must be the one jobq's schema is in (``postgres.dsn``). On RabbitMQ it is
    published once the transaction commits (``transaction.on_commit``), never if it rolls back.
    Returns the job's id, or None when its publish waits for a commit.
    """
    config = jobq_config()
    settings = config.settings()
    if isinstance(what, Task):
        job, queue = what.new_job(args), queue or what.options.queue
    else:
        job = what
    queue = queue or settings.queue
    alias = using or config.jobq.database
    if settings.transport != "postgres":
        publisher, ids = config.publisher(), []
        transaction.on_commit(lambda: ids.append(publisher.enqueue(job, queue=queue)), using=alias)
        return ids[0] if ids else None
    with transaction.atomic(using=alias):  # the caller's transaction, or one of its own
        raw = _psycopg(alias)
        return enqueue_sync(raw, job, queue=queue, schema=settings.postgres.schema,
                            max_attempts=settings.retry.max_attempts, limits=settings.limits)


def _psycopg(alias: str) -> psycopg.Connection[Any]:
    """Django's psycopg 3 connection for ``alias``, its transaction begun."""
    connection = connections[alias]
    connection.ensure_connection()
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigError(f"jobq.contrib.django needs database {alias!r} on PostgreSQL through "
                          f"psycopg 3 (found {type(raw).__module__}); pip install 'psycopg[binary]'",
                          key="JOBQ.DATABASE")
    if raw.info.transaction_status == TransactionStatus.IDLE and not raw.autocommit:
        # Inside atomic(): psycopg begins the transaction with the first statement, and none
        # has run yet. Begin it now, so the enqueue sees (and joins) it.
        raw.execute("SELECT 1")
    return raw
