"""A blocked event loop is not a late server (jobq.core.within: Patience, Deadline).

The answer arrives while the loop is blocked past the deadline; before Patience the deadline
fired first on waking and the call failed (these tests failed with TimeoutError /
ConnectionLost on the code before it).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from jobq.core.errors import ConnectionLost
from jobq.core.within import Deadline, within
from jobq.transports.postgres.connect import deadline

BLOCK = 0.6  # the loop is blocked this long, twice the deadline
LIMIT = 0.3


def _answering_peer(peer: socket.socket, delay: float | None) -> threading.Thread:
    """A server on its own thread: reads one request, answers it ``delay`` s later (None: never)."""
    def serve() -> None:
        peer.recv(16)
        if delay is not None:
            time.sleep(delay)
            peer.sendall(b"answer\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


async def _ask_then_block(delay: float | None) -> bytes:
    ours, peer = socket.socketpair()
    _answering_peer(peer, delay)
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        writer.write(b"ask\n")
        await writer.drain()
        asyncio.get_running_loop().call_soon(time.sleep, BLOCK)  # a handler blocking the loop
        return await within(reader.readline(), LIMIT)
    finally:
        writer.close()
        peer.close()


async def test_an_answer_that_came_during_a_block_is_read() -> None:
    assert await _ask_then_block(0.05) == b"answer\n"


async def test_a_server_that_never_answers_still_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await _ask_then_block(None)
    # the block, then as long again as the timer was late (at most the deadline), then a turn
    assert time.monotonic() - started < BLOCK + 2 * LIMIT + 0.5


async def test_the_postgres_deadline_waits_out_a_block_too() -> None:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, done.set)  # the "answer", due during the block
    loop.call_soon(time.sleep, BLOCK)
    async with deadline("test", LIMIT):
        await done.wait()
    with pytest.raises(ConnectionLost):
        async with deadline("test", LIMIT):
            await asyncio.Event().wait()


async def test_an_outside_cancel_passes_through_a_deadline() -> None:
    async def body() -> None:
        async with Deadline(5):
            await asyncio.sleep(30)
    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_timer_on_time_fires_on_time() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with Deadline(0.1):
            await asyncio.sleep(5)
    assert time.monotonic() - started < 0.1 + 0.2
