"""A fault-injection TCP proxy for the tests: latency, a partition (stall), resets, throttling.

``FaultProxy(host, port)`` listens on 127.0.0.1 at a free port of its own and forwards every
connection to ``host:port``. It runs its own event loop in a thread, so a test drives it the
same way whether the client is in-process (an async test) or a subprocess pointed at
``proxy.port`` (a consumer CLI). Faults apply to the connections open now and to later ones:

- ``latency(s)``: every chunk is delivered ``s`` seconds after it was read (both directions).
- ``stall()`` / ``heal()``: a black hole. No byte moves either way and nothing is closed; new
  connections are accepted but not forwarded. What was read meanwhile is delivered on
  ``heal()``, as TCP retransmission would after a real partition. Note that the kernel still
  ACKs data and keepalive probes on both legs, so TCP keepalives and ``tcp_user_timeout``
  cannot see this stall: only application-level deadlines do.
- ``reset()``: every open connection is closed with RST (SO_LINGER 0) on both legs.
- ``throttle(bps)``: at most ``bps`` bytes per second per direction and connection (0: off).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CHUNK = 65536
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class _Link:
    """One proxied connection: the client's leg and the upstream leg."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self, *, rst: bool) -> None:
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if rst and sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """An asyncio TCP proxy on 127.0.0.1 in a thread of its own; see the module docstring."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.accepted = 0  # connections accepted so far (tests assert a client came through)
        self._latency = 0.0
        self._rate = 0
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()  # set: bytes flow; clear: stalled
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy",
                                        daemon=True)

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen (the port is in ``self.port`` when this returns) and start forwarding."""
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        """Close the listener and every connection (RST), stop the loop and its thread."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._stop(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------------------

    def latency(self, seconds: float) -> None:
        """Deliver every chunk ``seconds`` after it was read (0: none)."""
        self._latency = max(0.0, seconds)

    def throttle(self, bytes_per_second: int) -> None:
        """At most ``bytes_per_second`` per direction and connection (0: no limit)."""
        self._rate = max(0, int(bytes_per_second))

    def stall(self) -> None:
        """Stop moving bytes both ways without closing anything (a partition); in effect
        once this returns (the proxy's loop, in its own thread, has stopped forwarding)."""
        self._call(self._switch(self._open.clear))

    def heal(self) -> None:
        """End a stall: bytes held meanwhile are delivered, new connections forwarded; in
        effect once this returns."""
        self._call(self._switch(self._open.set))

    def reset(self) -> int:
        """Close every open connection with RST on both legs; return how many there were."""
        return self._call(self._reset())

    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        return len(self._links)

    # -- inside the loop -------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @staticmethod
    async def _switch(flip: Callable[[], None]) -> None:
        flip()

    async def _start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _reset(self) -> int:
        links = list(self._links)
        for link in links:
            link.abort(rst=True)
        self._links.difference_update(links)
        await asyncio.sleep(0)  # let the cancelled pumps unwind
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._open.wait()  # a stalled proxy holds new connections unanswered
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except (OSError, asyncio.CancelledError):
            link.abort(rst=False)
            self._links.discard(link)
            return
        link.upstream = up_writer
        link.tasks = [asyncio.create_task(self._direction(reader, up_writer, link)),
                      asyncio.create_task(self._direction(up_reader, writer, link))]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        link.abort(rst=False)
        self._links.discard(link)

    async def _direction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         link: _Link) -> None:
        """Read from one leg, write to the other: through the latency queue, stall and throttle."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        try:
            while True:
                await self._open.wait()  # stalled: stop reading, so the sender's kernel buffers fill
                data = await reader.read(CHUNK)
                if not data:
                    break
                queue.put_nowait((self._loop.time() + self._latency, data))
            await queue.join()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            sender.cancel()
            # One leg ended: end the other too, so neither side waits on a half-open link.
            for task in link.tasks:
                task.cancel()

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]],
                    writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - self._loop.time()))
            while data:
                await self._open.wait()
                piece = data if not self._rate else data[:max(1, self._rate // 50)]
                data = data[len(piece):]
                writer.write(piece)
                await writer.drain()
                if self._rate:
                    await asyncio.sleep(len(piece) / self._rate)
            queue.task_done()
