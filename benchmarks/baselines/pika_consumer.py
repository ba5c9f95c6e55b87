"""Baseline: a bare pika consumer, the fastest Python AMQP client measured on these machines.

``pika.BlockingConnection``, prefetch 100, one callback per message, a ``basic_ack`` per
message, the JSON body decoded and the completion recorded as every target does. No retries,
no batching, no event loop: jobq's RabbitMQ consumer is measured against it on the drain
(issue: at least 1.0x). Its callbacks run one at a time, so it takes no part in the io
scenario (jobs that sleep), where it would be measuring ``time.sleep``.

With ``--ack-every N`` it acks every Nth message with ``multiple=True`` (and what is left
once the messages pause for 10 ms): with a larger ``--prefetch``, the fastest loop we could
write with pika, the ``raw-pika-tuned`` target.
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
    unacked = 0  # --ack-every: messages run since the last ack
    tag = 0  # the latest of them

    def handle(channel: Any, method: Any, properties: Any, body: bytes) -> None:
        nonlocal opened, last, unacked, tag
        while not opened:
            opened = os.path.exists(args.gate)
            if not opened:
                time.sleep(GATE_POLL)
        rec.job(json.loads(body))
        if args.ack_every <= 1:
            channel.basic_ack(method.delivery_tag)
        else:
            unacked, tag = unacked + 1, method.delivery_tag
            if unacked >= args.ack_every:
                channel.basic_ack(tag, multiple=True)
                unacked = 0
        last = time.monotonic()

    connection = pika.BlockingConnection(pika.URLParameters(args.url))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=args.prefetch)
        channel.basic_consume(args.queue, handle)
        print(f"consuming queue {args.queue!r} (raw pika)", file=sys.stderr, flush=True)
        while not stopping:
            connection.process_data_events(time_limit=0.01 if unacked else 0.1)
            if unacked and time.monotonic() - last > 0.01:  # a pause: ack what is left
                channel.basic_ack(tag, multiple=True)
                unacked = 0
            if args.once and opened and time.monotonic() - last > args.idle:
                break
    finally:
        if connection.is_open:
            connection.close()


def main() -> None:
    """``python -m benchmarks.baselines.pika_consumer --url ... --queue ... --dir ...``."""
    p = amqp_parser(__doc__)
    p.add_argument("--ack-every", type=int, default=1,
                   help="ack every Nth message with multiple=True (1: each message)")
    consume(p.parse_args())

if __name__ == "__main__":
    main()
