"""The fault proxy itself, against a tiny echo server: forwarding, latency, stall, reset, throttle."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest

from tests.faultproxy import FaultProxy

Make = Callable[[str, int], FaultProxy]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def _client(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     data: bytes, timeout: float = 5) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), timeout)


async def test_forwards_both_ways_on_a_port_of_its_own(echo_port: int, fault_proxy: Make) -> None:
    proxy = fault_proxy("127.0.0.1", echo_port)
    assert proxy.port not in (0, echo_port)
    reader, writer = await _client(proxy)
    assert await _roundtrip(reader, writer, b"hello") == b"hello"
    assert await _roundtrip(reader, writer, b"x" * 300_000) == b"x" * 300_000
    assert proxy.connections == 1 and proxy.accepted == 1
    writer.close()


async def test_latency_delays_each_direction(echo_port: int, fault_proxy: Make) -> None:
    proxy = fault_proxy("127.0.0.1", echo_port)
    reader, writer = await _client(proxy)
    proxy.latency(0.2)
    started = time.monotonic()
    assert await _roundtrip(reader, writer, b"ping") == b"ping"
    assert time.monotonic() - started >= 0.39  # 0.2 s there, 0.2 s back
    proxy.latency(0)
    started = time.monotonic()
    await _roundtrip(reader, writer, b"ping")
    assert time.monotonic() - started < 0.2
    writer.close()


async def test_stall_holds_bytes_without_closing_until_heal(echo_port: int, fault_proxy: Make) -> None:
    proxy = fault_proxy("127.0.0.1", echo_port)
    reader, writer = await _client(proxy)
    await _roundtrip(reader, writer, b"before")
    proxy.stall()
    writer.write(b"during")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(6), 0.5)
    assert not reader.at_eof() and proxy.connections == 1  # a black hole, not a close
    late_reader, late_writer = await _client(proxy)  # accepted, not forwarded
    late_writer.write(b"new")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(late_reader.readexactly(3), 0.3)
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(6), 5) == b"during"
    assert await asyncio.wait_for(late_reader.readexactly(3), 5) == b"new"
    writer.close()
    late_writer.close()


async def test_reset_closes_every_connection_with_rst(echo_port: int, fault_proxy: Make) -> None:
    proxy = fault_proxy("127.0.0.1", echo_port)
    links = [await _client(proxy) for _ in range(3)]
    for reader, writer in links:
        await _roundtrip(reader, writer, b"up")
    assert proxy.reset() == 3
    for reader, _ in links:
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 5)
    assert proxy.connections == 0
    reader, writer = await _client(proxy)  # still accepting afterwards
    assert await _roundtrip(reader, writer, b"again") == b"again"
    writer.close()


async def test_throttle_limits_the_rate(echo_port: int, fault_proxy: Make) -> None:
    proxy = fault_proxy("127.0.0.1", echo_port)
    reader, writer = await _client(proxy)
    proxy.throttle(40_000)
    started = time.monotonic()
    assert await _roundtrip(reader, writer, b"y" * 20_000) == b"y" * 20_000
    assert time.monotonic() - started >= 0.45  # 20 kB at 40 kB/s, each way (pipelined)
    proxy.throttle(0)
    writer.close()


def test_stop_ends_the_thread_and_refuses_connections() -> None:
    proxy = FaultProxy("127.0.0.1", 9).start()  # works from a sync test too
    port = proxy.port
    proxy.stop()
    assert not proxy._thread.is_alive()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
