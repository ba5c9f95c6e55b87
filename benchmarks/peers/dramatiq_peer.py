"""Peer: dramatiq on RabbitMQ (its pika broker), on a queue of the case's own.

dramatiq declares its queues itself (``<q>``, ``<q>.DQ`` for delays, ``<q>.XQ`` for dead
messages; classic queues), so ``install`` declares them through the broker and ``drop``
deletes them. The consumer is dramatiq's ``Worker`` with ``--concurrency`` threads (dramatiq
runs actors in threads; its prefetch is twice the threads), each recording into a file of its
own. dramatiq has no drain mode: ``--once`` stops the worker once a second has passed with
nothing completed after the first job. The producer sends one message per job
(``actor.send``: dramatiq has no batch enqueue), or open-loop at ``--rate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import dramatiq
import pika  # type: ignore[import-untyped]
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from benchmarks.peers import common
from benchmarks.peers.common import ThreadedJob, produce

IDLE_S = 1.0  # --once: nothing completed for this long after the first job: done


def broker_for(args: argparse.Namespace) -> RabbitmqBroker:
    """A dramatiq broker on the case's RabbitMQ, with dramatiq's default middleware."""
    broker = RabbitmqBroker(url=args.url)
    dramatiq.set_broker(broker)
    return broker


def install(args: argparse.Namespace) -> None:
    broker = broker_for(args)
    broker.declare_queue(args.queue, ensure=True)
    broker.close()


def drop(args: argparse.Namespace) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(args.url))
    try:
        channel = connection.channel()
        for name in (args.queue, f"{args.queue}.DQ", f"{args.queue}.XQ"):
            channel.queue_delete(name)
    finally:
        connection.close()


def producer(args: argparse.Namespace) -> None:
    broker = broker_for(args)
    actor = dramatiq.actor(lambda **_: None, actor_name="bench", queue_name=args.queue,
                           broker=broker)

    async def send(bodies: Sequence[bytes]) -> None:
        for body in bodies:
            actor.send(**json.loads(body))

    asyncio.run(produce(args.count, args.rate, send))
    broker.close()


def consumer(args: argparse.Namespace) -> None:
    broker = broker_for(args)
    done = ThreadedJob(args)

    def bench(**job: Any) -> None:
        done.run(job)

    dramatiq.actor(bench, actor_name="bench", queue_name=args.queue, broker=broker,
                   max_retries=0)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    worker = dramatiq.Worker(broker, queues={args.queue}, worker_threads=args.concurrency)
    worker.start()
    print(f"consuming queue {args.queue!r} (dramatiq)", file=sys.stderr, flush=True)
    try:
        while not stopping.wait(0.05):
            if args.once and done.last and time.monotonic() - done.last > IDLE_S:
                break
    finally:
        worker.stop()
        broker.close()


def main() -> None:
    """``python -m benchmarks.peers.dramatiq_peer install|drop|produce|consume ...``."""
    common.main(__doc__, {"install": install, "drop": drop, "produce": producer,
                          "consume": consumer})


if __name__ == "__main__":
    main()
