"""Reading AMQP frames at a consumer's rate: buffered reads, and the two frames of every delivery
decoded directly.

Where the consumer's CPU went (py-spy, a classic-queue drain of no-op jobs): about 60 % in
aiormq and pamqp, a third of that in decoding. Per frame, aiormq's ``FrameReceiver`` takes a
lock, fills a ``BytesIO`` and awaits the stream three times; per message pamqp decodes a
``Basic.Deliver`` (11 us here) and a content header (21 us) by walking each class's
attributes through its generic type dispatch. Both are exact, and slow: a bare pika consumer
spends about what they spend on their own.

``install`` (once per process, from ``RabbitLink``: before any jobq connection opens, never at
import) swaps in

* ``BufferedFrameReceiver`` for aiormq's ``FrameReceiver``: one read of up to 64 KiB from the
  stream, and every whole frame in it handed out without awaiting again. What it hands out is
  what aiormq's gives (``pamqp.frame.unmarshal`` of the same bytes), with the same errors for
  a protocol header, a broken frame, a closed or reset connection;
* direct decoders for the method frame ``Basic.Deliver`` and the content header of class
  Basic (one flag word: every property AMQP 0-9-1 has): the same objects pamqp builds, field
  for field, with the total decoders of ``frames`` for short strings, the timestamp and the
  headers table (an undecodable value is an ``Undecodable``, as there). Every other frame, and
  a header with a second flag word, goes to pamqp as before.

Both are checked against pamqp's own decoding (tests/unit/test_rmq_reading.py). If a later
aiormq or pamqp no longer has what is replaced, ``install`` replaces nothing and says so at
debug level: the consumer is slower, not wrong; ``installed()`` tells, and a test of it
fails on such an upgrade.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any

import aiormq.connection
import pamqp.frame
from aiormq.exceptions import AMQPConnectionError, InvalidFrameError, ProtocolSyntaxError
from pamqp import commands, header
from pamqp.exceptions import PAMQPException, UnmarshalingException

from jobq.transports.rabbitmq import frames

READ_SIZE = 1 << 16  # bytes asked of the stream per read
_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
_CONTENT_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, first flag word
_LONGLONG = struct.Struct(">q")  # signed, as pamqp reads a longlong
_DELIVER = struct.pack(">HH", 60, 60)  # Basic.Deliver's class and method ids
_BASIC = 60
_new = object.__new__
_log = logging.getLogger("jobq.rabbitmq")
# pamqp's own, as they were before install: every frame not decoded here goes to them.
# (None if a pamqp release renames them: install then replaces nothing.)
_PAMQP_METHOD: Callable[[bytes], Any] | None = getattr(pamqp.frame, "_unmarshal_method_frame",
                                                      None)
_PAMQP_HEADER: Callable[[bytes], header.ContentHeader] | None = getattr(
    pamqp.frame, "_unmarshal_header_frame", None)


# aiormq's receiver (object if a release renames it: install then replaces nothing)
_AiormqReceiver: Any = getattr(aiormq.connection, "FrameReceiver", object)


class BufferedFrameReceiver(_AiormqReceiver):  # type: ignore[misc]
    """aiormq's FrameReceiver, reading the stream in chunks rather than three awaits a frame.

    One reader at a time, as aiormq uses it (the handshake, then the connection's reader
    task), so no lock: the buffer is this object's own.
    """

    reader: asyncio.StreamReader  # aiormq's attributes, set by its __init__
    started: bool

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._buffer = b""
        self._at = 0  # where the next frame starts in _buffer

    async def get_frame(self) -> Any:  # aiormq's ReceivedFrame
        """The next frame, decoded.

        As aiormq's: StopAsyncIteration if the stream had ended before the call, with every
        frame handed out; AMQPConnectionError if it ends while a frame is awaited (the
        connection is then closed as lost, not as closed by us).
        """
        if self._at == len(self._buffer) and self.reader.at_eof():
            raise StopAsyncIteration
        while True:
            buffer, at = self._buffer, self._at
            held = len(buffer) - at
            if held >= _FRAME_HEAD.size:
                if not self.started:
                    if buffer.startswith(b"AMQP", at):  # the broker's answer to a wrong version
                        raise ProtocolSyntaxError("Unexpected AMQP protocol header")
                    self.started = True
                end = at + _FRAME_HEAD.size + _FRAME_HEAD.unpack_from(buffer, at)[2] + 1
                if len(buffer) >= end:
                    self._at = end
                    try:
                        return pamqp.frame.unmarshal(buffer[at:end])
                    except PAMQPException as exc:
                        raise InvalidFrameError(str(exc)) from exc
                # The rest of a frame larger than what came: read in one piece, so that a big
                # frame is joined once, not once per read.
                self._buffer, self._at = buffer[at:] + await self._read(end - len(buffer)), 0
                continue
            chunk = await self._read()
            if not chunk:
                raise AMQPConnectionError("Server connection unexpectedly closed. Read "
                                          f"{held} bytes of a frame")
            self._buffer, self._at = (buffer[at:] + chunk if held else chunk), 0

    async def _read(self, exactly: int = 0) -> bytes:
        """Up to READ_SIZE bytes, or ``exactly`` that many (b"" at the end of the stream)."""
        try:
            if exactly:
                return await self.reader.readexactly(exactly)
            return await self.reader.read(READ_SIZE)
        except asyncio.IncompleteReadError as exc:
            raise AMQPConnectionError(
                "Server connection unexpectedly closed. Read "
                f"{len(exc.partial)} bytes but {exc.expected} bytes expected") from exc
        except ConnectionRefusedError as exc:
            raise AMQPConnectionError(f"Server connection refused: {exc!r}") from exc
        except ConnectionResetError as exc:
            raise AMQPConnectionError(f"Server connection reset: {exc!r}") from exc
        except ConnectionError as exc:
            raise AMQPConnectionError(f"Server connection error: {exc!r}") from exc
        except OSError as exc:
            raise AMQPConnectionError(f"Server communication error: {exc!r}") from exc


def _short_str(data: bytes, at: int) -> tuple[int, Any]:
    """The short string at ``at`` and the offset after it (text that is not UTF-8: frames')."""
    end = at + 1 + data[at]  # past the end: what is there, as pamqp reads it (the next read fails)
    try:
        return end, data[at + 1:end].decode("utf-8")
    except UnicodeDecodeError:
        return end, frames.short_str(data[at:end])[1]


def method_frame(frame_data: bytes) -> Any:
    """pamqp's method frame: Basic.Deliver decoded here, any other method by pamqp."""
    if not frame_data.startswith(_DELIVER):
        assert _PAMQP_METHOD is not None  # install checked
        return _PAMQP_METHOD(frame_data)
    try:
        at, consumer_tag = _short_str(frame_data, 4)
        delivery_tag = _LONGLONG.unpack_from(frame_data, at)[0]
        redelivered = bool(frame_data[at + 8] & 1)
        at, exchange = _short_str(frame_data, at + 9)
        _, routing_key = _short_str(frame_data, at)
    except (IndexError, ValueError, struct.error) as exc:
        raise UnmarshalingException("Basic.Deliver", exc) from exc
    deliver = _new(commands.Basic.Deliver)
    deliver.consumer_tag = consumer_tag
    deliver.delivery_tag = delivery_tag
    deliver.redelivered = redelivered
    deliver.exchange = exchange
    deliver.routing_key = routing_key
    return deliver


# Basic.Properties in wire order: (name, flag bit, how it is read)
_PROPERTIES = tuple((name, commands.Basic.Properties.flags[name],
                     getattr(commands.Basic.Properties, "_" + name))
                    for name in commands.Basic.Properties.__slots__)
_KINDS = frozenset(("shortstr", "octet", "timestamp", "table"))  # the ones read here


def header_frame(frame_data: bytes) -> header.ContentHeader:
    """pamqp's content header: class Basic with one flag word decoded here, else by pamqp."""
    assert _PAMQP_HEADER is not None  # install checked
    try:
        class_id, weight, body_size, flags = _CONTENT_HEAD.unpack_from(frame_data)
    except struct.error:
        return _PAMQP_HEADER(frame_data)  # pamqp says how it is broken
    if class_id != _BASIC or flags & 1:  # another class, or a second flag word
        return _PAMQP_HEADER(frame_data)
    properties = commands.Basic.Properties()
    at = _CONTENT_HEAD.size
    try:
        for name, flag, kind in _PROPERTIES:
            if not flags & flag:
                continue
            value: Any
            if kind == "shortstr":
                at, value = _short_str(frame_data, at)
            elif kind == "octet":
                value = frame_data[at]
                at += 1
            elif kind == "timestamp":
                used, value = frames.timestamp(frame_data[at:at + 8])
                at += used
            else:  # the headers table
                used, value = frames.field_table(frame_data[at:])
                at += used
            setattr(properties, name, value)
    except (IndexError, ValueError, struct.error) as exc:
        raise UnmarshalingException("ContentHeader", exc) from exc
    content = _new(header.ContentHeader)
    content.class_id = class_id
    content.weight = weight
    content.body_size = body_size
    content.properties = properties
    return content


def installed() -> bool:
    """True once the buffered receiver and the direct decoders are in place."""
    return (aiormq.connection.FrameReceiver is BufferedFrameReceiver
            and pamqp.frame._unmarshal_method_frame is method_frame
            and pamqp.frame._unmarshal_header_frame is header_frame)


def install() -> None:
    """Put the buffered receiver and the direct decoders in place (idempotent; see above)."""
    frames.install()  # what still goes to pamqp decodes totally too
    if installed():
        return
    missing = [name for name, found in (("aiormq's FrameReceiver", _AiormqReceiver),
                                        ("pamqp's method frame decoder", _PAMQP_METHOD),
                                        ("pamqp's header frame decoder", _PAMQP_HEADER))
               if found is None or found is object]
    if any(kind not in _KINDS for _, _, kind in _PROPERTIES):
        missing.append("a Basic property of a type read here")
    if missing:
        _log.debug("AMQP frames are read as aiormq and pamqp read them: %s not found",
                   ", ".join(missing))
        return
    aiormq.connection.FrameReceiver = BufferedFrameReceiver  # type: ignore[misc]
    pamqp.frame._unmarshal_method_frame = method_frame
    pamqp.frame._unmarshal_header_frame = header_frame

