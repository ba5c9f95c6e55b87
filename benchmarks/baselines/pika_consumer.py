"""Baseline: a bare pika consumer, the fastest Python AMQP client measured on these machines.

``pika.BlockingConnection``, prefetch 100, one callback per message, a ``basic_ack`` per
message, the JSON body decoded and the completion recorded as every target does. No retries,
no batching, no event loop: jobq's RabbitMQ consumer is measured against it on the drain
(issue: at least 1.0x). Its callbacks run one at a time, so it takes no part in the io
scenario (jobs that sleep), where it would be measuring ``time.sleep``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

import pika  # type: ignore[import-untyped]

from benchmarks.baselines.amqp import amqp_parser
from benchmarks.processors import Recorder

GATE_POLL = 0.002  # seconds between looks for the start gate's file


def consume(args: argparse.Namespace) -> None:
    """Consume until SIGTERM, or (``--once``) until no message came for ``--idle`` seconds."""
    rec = Recorder(args.dir)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    opened = not args.gate
    last = time.monotonic()

    def handle(channel: Any, method: Any, properties: Any, body: bytes) -> None:
        nonlocal opened, last
        while not opened:
            opened = os.path.exists(args.gate)
            if not opened:
                time.sleep(GATE_POLL)
        rec.job(json.loads(body))
        channel.basic_ack(method.delivery_tag)
        last = time.monotonic()

    connection = pika.BlockingConnection(pika.URLParameters(args.url))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=args.prefetch)
        channel.basic_consume(args.queue, handle)
        print(f"consuming queue {args.queue!r} (raw pika)", file=sys.stderr, flush=True)
        while not stopping:
            connection.process_data_events(time_limit=0.1)
            if args.once and opened and time.monotonic() - last > args.idle:
                break
    finally:
        if connection.is_open:
            connection.close()


def main() -> None:
    """``python -m benchmarks.baselines.pika_consumer --url ... --queue ... --dir ...``."""
    consume(amqp_parser(__doc__).parse_args())

if __name__ == "__main__":
    main()
