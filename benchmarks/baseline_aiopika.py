"""The yardstick: a bare aio-pika consumer (prefetch 100, one manual ack per message, no-op).

``python -m benchmarks.baseline_aiopika URL QUEUE COUNT`` consumes COUNT messages from the
existing QUEUE and prints one JSON line: messages, seconds from the first message to the last
ack, and the rate.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aio_pika
from aio_pika.abc import AbstractIncomingMessage


async def consume(url: str, queue_name: str, count: int, prefetch: int = 100) -> dict[str, float]:
    """Consume ``count`` messages, acking each one as it comes; return the timing."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        queue = await channel.get_queue(queue_name)
        done = asyncio.Event()
        seen = 0
        first = 0.0

        async def handle(message: AbstractIncomingMessage) -> None:
            nonlocal seen, first
            if seen == 0:
                first = time.perf_counter()
            await message.ack()
            seen += 1
            if seen >= count:
                done.set()

        await queue.consume(handle)
        await done.wait()
        seconds = time.perf_counter() - first
    return {"messages": seen, "seconds": seconds, "jobs_per_second": seen / seconds}


def main() -> None:
    """Command-line entry: URL QUEUE COUNT."""
    url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(asyncio.run(consume(url, queue, count))))


if __name__ == "__main__":
    main()
