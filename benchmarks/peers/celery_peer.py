"""Peer: Celery on RabbitMQ (py-amqp through kombu), on a queue of the case's own.

Celery routes a task to its default queue: ``task_default_queue`` is the case's queue, so
Celery declares a durable classic queue ``<q>`` bound to a direct exchange ``<q>`` (routing
key ``<q>``). ``install`` declares that queue and exchange through Celery's own routing
(``app.amqp.queues``) and ``drop`` deletes both. The worker also declares what every Celery
worker declares (its defaults are kept: gossip, mingle, heartbeat, remote control): a
``<node>.celery.pidbox`` queue and a ``celeryev.<uuid>`` queue, both auto-deleted when the
worker disconnects, and the shared ``celery.pidbox``, ``reply.celery.pidbox`` and
``celeryev`` exchanges, which every Celery on the broker uses (left alone, like jobq's shared
exchange). No result backend (``task_ignore_result=True``).

The consumer is one Celery worker run in this process (``app.Worker``, what ``celery worker``
starts; node ``bench-<pid>@<host>``, so two consumers of a case are two nodes) with the threads
pool at ``--concurrency`` (``-P threads -c N``): the other peers and jobq run their jobs in one
process, and Celery's default prefork pool would fork N processes (100 in the io case). A job
that sleeps (``--sleep-ms``) sleeps in its pool thread, as with dramatiq.

Acks: ``task_acks_late=True`` (Celery's default is off: it acks a message when the job
starts). jobq acks after the job, so the job's completion is what both acknowledge: like with
like. Prefetch: Celery's default ``worker_prefetch_multiplier`` 4, kept (prefetch 4 x
concurrency per worker, set channel-wide as Celery does on RabbitMQ): Celery's docs advise a
multiplier above 1 for many short jobs and 1 for long ones; these jobs are short (no-op,
10 ms).

Celery has no drain mode: ``--once`` stops the worker (Celery's own warm shutdown, as on
SIGTERM) once a second has passed with nothing completed after the first job. The producer
sends one message per job (``task.apply_async``: Celery has no batch publish; a ``group``
also publishes one message per task), without publisher confirms (Celery's default), or
open-loop at ``--rate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from celery import Celery, signals  # type: ignore[import-untyped]

from benchmarks.peers import common
from benchmarks.peers.common import ThreadedJob, produce

IDLE_S = 1.0  # --once: nothing completed for this long after the first job: done
PREFETCH_MULTIPLIER = 4  # Celery's default, stated


def app_for(args: argparse.Namespace, concurrency: int = 1) -> Celery:
    """A Celery app on the case's RabbitMQ, its default queue the case's queue."""
    app = Celery("bench", broker=args.url, set_as_current=True)
    app.conf.update(
        task_default_queue=args.queue,
        task_ignore_result=True,
        task_acks_late=True,
        worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
        worker_pool="threads",
        worker_concurrency=concurrency,
        broker_connection_retry_on_startup=True,
        worker_redirect_stdouts=False,
    )
    return app


def install(args: argparse.Namespace) -> None:
    """The case's queue and exchange, as Celery's routing declares them."""
    app = app_for(args)
    with app.connection_for_write() as connection:
        app.amqp.queues[args.queue].bind(connection.default_channel).declare()


def drop(args: argparse.Namespace) -> None:
    """The case's queue and its exchange deleted (the worker's own queues auto-delete)."""
    app = app_for(args)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_delete(args.queue)
        channel.exchange_delete(args.queue)


def producer(args: argparse.Namespace) -> None:
    app = app_for(args)

    @app.task(name="bench")  # type: ignore[untyped-decorator]
    def bench(**_: Any) -> None:  # the worker's body runs; this one only names the task
        return None

    async def send(bodies: Sequence[bytes]) -> None:
        for body in bodies:
            bench.apply_async(kwargs=json.loads(body))

    asyncio.run(produce(args.count, args.rate, send))
    app.close()


def consumer(args: argparse.Namespace) -> None:
    app = app_for(args, args.concurrency)
    done = ThreadedJob(args)

    @app.task(name="bench")  # type: ignore[untyped-decorator]
    def bench(**job: Any) -> None:
        done.run(job)

    def ready(**_: Any) -> None:
        print(f"consuming queue {args.queue!r} (celery)", file=sys.stderr, flush=True)

    def idle() -> None:  # --once: Celery's own warm shutdown, the path SIGTERM takes
        while not (done.last and time.monotonic() - done.last > IDLE_S):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    signals.worker_ready.connect(ready, weak=False)
    if args.once:
        threading.Thread(target=idle, daemon=True).start()
    worker = app.Worker(hostname=f"bench-{os.getpid()}@{socket.gethostname()}",
                        queues=[args.queue], loglevel="WARNING", quiet=True)
    worker.start()
    if worker.exitcode:
        sys.exit(worker.exitcode)


def main() -> None:
    """``python -m benchmarks.peers.celery_peer install|drop|produce|consume ...``."""
    common.main(__doc__, {"install": install, "drop": drop, "produce": producer,
                          "consume": consumer})


if __name__ == "__main__":
    main()
