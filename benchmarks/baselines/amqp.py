"""Baseline: a bare aio-pika consumer, what a team writes by hand against jobq's work queue.

Prefetch 100, one callback per message, a manual ``ack()`` per message, the default asyncio
loop. No retries, no batching: the naive client jobq's RabbitMQ consumer is measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from benchmarks.processors import Gate, Recorder


async def consume(args: argparse.Namespace) -> None:
    """Consume until SIGTERM, or (``--once``) until no message came for ``--idle`` seconds."""
    rec, start = Recorder(args.dir), Gate(args.gate)
    pause = args.sleep_ms / 1000.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    last = loop.time()

    async def handle(message: AbstractIncomingMessage) -> None:
        nonlocal last
        if not start.open:
            await start.wait()
        if pause:
            await asyncio.sleep(pause)
        rec.job(json.loads(message.body))
        await message.ack()
        last = loop.time()

    connection = await aio_pika.connect(args.url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=args.prefetch)
        queue = await channel.get_queue(args.queue, ensure=True)
        await queue.consume(handle)
        print(f"consuming queue {args.queue!r} (raw aio-pika)", file=sys.stderr, flush=True)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.idle / 2)
            if args.once and start.open and loop.time() - last > args.idle:
                break


def amqp_parser(description: str | None) -> argparse.ArgumentParser:
    """The options every bare AMQP consumer of the benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--dir", required=True, help="completion record directory")
    p.add_argument("--prefetch", type=int, default=100)
    p.add_argument("--once", action="store_true", help="exit once the queue stays empty")
    p.add_argument("--idle", type=float, default=0.5, help="--once: seconds without a message")
    p.add_argument("--gate", default="", help="hold messages until this file exists")
    return p


def main() -> None:
    """``python -m benchmarks.baselines.amqp --url ... --queue ... --dir ...``."""
    p = amqp_parser(__doc__)
    p.add_argument("--sleep-ms", type=float, default=0.0, help="handler time (0: no-op)")
    asyncio.run(consume(p.parse_args()))


if __name__ == "__main__":
    main()
