"""RabbitMQ connections: open with retries and backoff, translate driver errors at the boundary."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection

from jobq.config import ConnectConfig
from jobq.core.backoff import cancelled
from jobq.core.errors import ConnectionLost
from jobq.core.within import Deadline
from jobq.transports import common
from jobq.transports.rabbitmq import reading
from jobq.transports.rabbitmq.refusals import describe_connect, refusal

CLOSE_TIMEOUT = 2.0  # a connection.close that gets no answer is given up on

# What "the link to the broker broke" looks like from aio-pika and aiormq.
LINK_ERRORS: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    OSError,
    TimeoutError,
)



def server_address(url: str) -> str:
    """``host:port`` of an AMQP URL, for messages (never the user or password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<invalid url>"
    return common.server_address(parts.hostname, port, 5671 if parts.scheme == "amqps" else 5672)


def with_heartbeat(url: str, heartbeat: int) -> str:
    """``url`` asking for an AMQP heartbeat of ``heartbeat`` seconds, unless it sets its own.

    aiormq reads the heartbeat from the URL only (``?heartbeat=N``, 60 s when absent) and asks
    the broker for exactly that; 0 leaves the URL alone.
    """
    if heartbeat <= 0:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if any(key == "heartbeat" for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return url
    fragment = url.find("#")
    base, tail = (url, "") if fragment < 0 else (url[:fragment], url[fragment:])
    joiner = "&" if parts.query else ("" if base.endswith("?") else "?")
    return f"{base}{joiner}heartbeat={heartbeat}{tail}"


def describe_amqp(exc: BaseException) -> str:
    """A one-line text for a driver error (aiormq puts the broker's reply in ``args[0]``)."""
    text = common.one_line(exc.args[0] if exc.args else exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def nacked(exc: BaseException | None) -> bool:
    """True for aiormq's negative confirm of a publish (a DeliveryError that is not a returned,
    unroutable message: PublishError)."""
    return (isinstance(exc, aiormq.exceptions.DeliveryError)
            and not isinstance(exc, aiormq.exceptions.PublishError))


def translated(what: str) -> AbstractContextManager[None]:
    """Turn driver errors into jobq's: ConnectionLost when the link broke, else TransportError."""
    return common.translating(what, lost=LINK_ERRORS, failed=(aiormq.exceptions.AMQPError, RuntimeError),
                              describe=describe_amqp)


@contextlib.asynccontextmanager
async def short_channel(link: RabbitLink, *, confirms: bool, what: str
                        ) -> AsyncIterator[AbstractChannel]:
    """A channel of ``link`` for one piece of work: driver errors translated (``what``), and
    closed on the way out, which returns whatever it took with basic.get and did not ack."""
    channel = await link.channel(confirms=confirms)
    try:
        with translated(what):
            yield channel
    finally:
        if not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()


class RabbitLink:
    """The process's AMQP connection: opened with retries, reopened after a loss.

    The transport, publisher and admin open their own channels on it. ``generation`` grows with
    every new connection, so holders of channels can tell theirs are from a dead one.
    """

    def __init__(self, url: str | Sequence[str], connect: ConnectConfig, *, role: str,
                 logger: logging.Logger | None = None, heartbeat: int = 0) -> None:
        reading.install()  # before any connection opens: frames read at a consumer's rate
        urls = [url] if isinstance(url, str) else list(url)
        # rabbitmq.heartbeat, unless the url asks for its own (see with_heartbeat)
        self._urls = [with_heartbeat(u, heartbeat) for u in urls]
        self._addresses = [server_address(u) for u in urls]
        self._next = 0  # the node to try first: the one that answered last
        self._connect = connect
        self._role = role
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._conn: AbstractConnection | None = None
        self._lost = False  # the broker or the network closed the current connection
        self.address = self._addresses[0]  # the node connected to (or tried first)
        self.generation = 0
        self.blocked = False  # the broker sent connection.blocked (a resource alarm)
        self.unblocked = asyncio.Event()  # set while not blocked
        self.unblocked.set()

    @property
    def connect_config(self) -> ConnectConfig:
        """The retry and timeout settings this link connects with."""
        return self._connect

    @property
    def is_open(self) -> bool:
        """True while the current connection is up."""
        return self._conn is not None and not self._conn.is_closed and not self._lost

    async def open(self, *, attempts: int | None = None) -> None:
        """Connect, retrying with backoff; ConnectionLost naming host:port after ``attempts`` tries.

        ``attempts`` defaults to ``connect.attempts``; 0 means try until cancelled.
        """
        limit = self._connect.attempts if attempts is None else attempts
        async for attempt in self._connect.backoff().attempts(limit):
            try:
                conn = await self._connect_any()
            except (aiormq.exceptions.AMQPError, OSError, TimeoutError, RuntimeError) as exc:
                where = ", ".join(self._addresses)
                if attempt.last:
                    raise ConnectionLost(f"cannot reach RabbitMQ at {where} after "
                                         f"{attempt.number} attempts: {describe_connect(exc)}"
                                         ) from exc
                self._log.warning("cannot reach RabbitMQ at %s (attempt %s): %s; retrying in %.1fs",
                                  where, attempt, describe_connect(exc), attempt.delay)
                continue
            if cancelled():  # connected as a cancel came, which the connect swallowed
                with contextlib.suppress(Exception):
                    async with Deadline(self._connect.timeout):
                        await conn.close()
                raise asyncio.CancelledError
            self._conn = conn
            self._lost = False
            self._set_blocked(False, "")
            conn.close_callbacks.add(self._on_close)
            self._watch_blocking(conn)
            self.generation += 1
            self._log.info("connected to RabbitMQ at %s", self.address)
            return

    async def _connect_any(self) -> AbstractConnection:
        """One try of every node, from the one that answered last; the last error if none does.

        A node that refuses (refusals.py: the login, the vhost, the TLS settings) fails at once
        with Refused: the same URL settings are meant for every node, so another would refuse
        too.
        """
        count = len(self._urls)
        key = "rabbitmq.urls" if count > 1 else "rabbitmq.url"
        failure: BaseException | None = None
        for step in range(count):
            index = (self._next + step) % count
            try:
                conn = await aio_pika.connect(
                    self._urls[index], timeout=self._connect.timeout,
                    client_properties={"connection_name": self._name()})
            except (aiormq.exceptions.AMQPError, OSError, TimeoutError, RuntimeError,
                    ValueError) as exc:
                refused = refusal(exc, self._urls[index], self._addresses[index], key)
                if refused is not None:
                    self.address = self._addresses[index]
                    raise refused from exc
                if isinstance(exc, ValueError):
                    raise
                failure = exc
                if count > 1:
                    self._log.info("RabbitMQ node %s does not answer (%s); trying the next",
                                   self._addresses[index], describe_connect(exc))
                continue
            self._next, self.address = index, self._addresses[index]
            return conn
        assert failure is not None
        raise failure

    async def reopen(self) -> None:
        """Drop the current connection (if any) and connect again, retrying until cancelled:
        from the node after the one just lost (a dark node would cost every try its timeout)."""
        await self.close()
        self._next = (self._next + 1) % len(self._urls)
        await self.open(attempts=0)

    async def channel(self, *, confirms: bool) -> AbstractChannel:
        """A new channel on the current connection (publisher confirms and returns if asked)."""
        if not self.is_open or self._conn is None:
            raise ConnectionLost(f"not connected to RabbitMQ at {self.address}")
        with translated("rabbitmq open channel"):
            return await self._conn.channel(publisher_confirms=confirms, on_return_raises=confirms)

    async def close(self) -> None:
        """Close the connection; errors on the way out are of no interest.

        At most CLOSE_TIMEOUT: a dark link answers no connection.close, and the socket is
        dropped anyway.
        """
        conn, self._conn = self._conn, None
        self._set_blocked(False, "")
        if conn is not None and not conn.is_closed:
            with contextlib.suppress(Exception):
                async with Deadline(CLOSE_TIMEOUT):
                    await conn.close()

    def _on_close(self, sender: object, _exc: BaseException | None) -> None:
        if sender is self._conn:
            self._lost = True
            self._set_blocked(False, "")

    def _watch_blocking(self, conn: AbstractConnection) -> None:
        """Hear connection.blocked/unblocked: aiormq handles them but offers no callback.

        Its handlers are private methods looked up on the instance for every frame, so each
        is wrapped per connection (and left alone, with blocking unreported, if missing).
        """
        raw: Any = getattr(conn.transport, "connection", None)
        prefix = "_Connection__handle_connection_"
        for what, blocked in (("blocked", True), ("unblocked", False)):
            handler: Callable[[Any], Awaitable[None]] | None = getattr(raw, prefix + what, None)
            if handler is None:
                self._log.debug("aiormq has no %s handler: blocking is not reported", what)
                return
            setattr(raw, prefix + what, self._hearing(handler, blocked, conn))

    def _hearing(self, handler: Callable[[Any], Awaitable[None]], blocked: bool,
                 conn: AbstractConnection) -> Callable[[Any], Awaitable[None]]:
        async def heard(frame: Any) -> None:
            if conn is self._conn:
                self._set_blocked(blocked, str(getattr(frame, "reason", "") or ""))
            await handler(frame)
        return heard

    def _set_blocked(self, blocked: bool, reason: str) -> None:
        if blocked == self.blocked:
            return
        self.blocked = blocked
        if blocked:
            self.unblocked.clear()
            self._log.warning("RabbitMQ at %s blocks publishing on the %s connection (%s): "
                              "copies are held until unblocked, enqueues wait up to "
                              "limits.enqueue_timeout",
                              self.address, self._role, reason or "a resource alarm")
        else:
            self.unblocked.set()
            if self._conn is not None and not self._lost:
                self._log.warning("RabbitMQ at %s unblocked publishing on the %s connection",
                                  self.address, self._role)

    def _name(self) -> str:
        return f"jobq {self._role} {socket.gethostname()}:{os.getpid()}"
