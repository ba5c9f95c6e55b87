"""Total decoding of the AMQP fields another publisher can make undecodable.

pamqp (the frame codec under aiormq) raises on three values a broker passes through as it got
them: a ``timestamp`` past the year 9999 (2^64-1: ``datetime`` overflows), a short string that
is not UTF-8 (``message_id``, ``type``, ``content_type``, a routing key routed by a ``CC``
header...) and a table field name that is not UTF-8. aiormq turns the raise into
``InvalidFrameError`` and closes the whole connection: every consumer on it loses its
in-flight deliveries, and the broker sends the same message again to the next one, for ever.
(A table value of an unknown type never gets that far: RabbitMQ 3.10 refuses the publish.)

``install`` replaces those three decoders in pamqp's lookup tables with ones that return an
``Undecodable`` instead of raising; the codec turns one into the reason the delivery is
malformed, and the pool dead-letters it. pamqp offers no hook for this, so the tables are
patched: once per process, at transport construction (never at import), only these entries,
each doing what pamqp does for every value it can decode. Truncated data still raises, as it
should: that frame is broken, not merely unusual.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from pamqp import decode

_TIMESTAMP = struct.Struct(">Q")
_LENGTH = struct.Struct(">I")
_UTC = datetime.UTC


class Undecodable(bytearray):
    """A field's raw bytes where its value cannot be decoded, with the reason.

    A bytearray so that a copy of the message can still be encoded (pamqp writes a bytearray
    as a byte array); the codec never forwards one as a property.
    """

    reason: str

    def __init__(self, raw: bytes, reason: str) -> None:
        super().__init__(raw)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def short_str(value: bytes) -> tuple[int, str | Undecodable]:
    """pamqp's short string, with text that is not UTF-8 kept as an Undecodable."""
    try:
        length = value[0]
    except IndexError as err:
        raise ValueError("Could not unpack short string value") from err
    raw = value[1:length + 1]
    try:
        return length + 1, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return length + 1, Undecodable(raw, f"is not UTF-8 ({exc.reason} at byte {exc.start}: "
                                            f"{bytes(raw)[:40]!r})")


def timestamp(value: bytes) -> tuple[int, datetime.datetime | Undecodable]:
    """pamqp's timestamp (over 2^32-1 read as milliseconds), out of range an Undecodable."""
    try:
        seconds: float = _TIMESTAMP.unpack_from(value)[0]
    except struct.error as err:
        raise ValueError("Could not unpack timestamp value") from err
    raw = seconds
    if seconds > 0xFFFFFFFF:
        seconds /= 1000.0
    try:
        return 8, datetime.datetime.fromtimestamp(seconds, tz=_UTC)
    except (ValueError, OverflowError, OSError):
        return 8, Undecodable(value[:8], f"timestamp {raw} is out of range")


def field_table(value: bytes) -> tuple[int, dict[str, Any] | Undecodable]:
    """pamqp's field table; one whose field names are not all UTF-8 is an Undecodable."""
    try:
        length = _LENGTH.unpack_from(value)[0]
    except struct.error as err:
        raise ValueError("Could not unpack data") from err
    end = 4 + length
    if end > len(value):
        raise ValueError("Field table length exceeds available data")
    offset, data, bad = 4, {}, None
    try:
        while offset < end:
            key_length = value[offset]
            offset += 1
            if offset + key_length > end:
                raise ValueError("Field table key length exceeds data")
            key_raw = value[offset:offset + key_length]
            offset += key_length
            consumed, result = decode.embedded_value(value[offset:])
            offset += consumed
            try:
                data[key_raw.decode("utf-8")] = result
            except UnicodeDecodeError:
                bad = bad or key_raw
    except (struct.error, TypeError, IndexError) as err:
        raise ValueError("Could not unpack data") from err
    if bad is not None:
        return end, Undecodable(value[4:end], f"a header name is not UTF-8 ({bytes(bad)[:40]!r})")
    return end, data


def install() -> None:
    """Make pamqp's decoding of timestamps, short strings and tables total (idempotent)."""
    decode.METHODS["shortstr"] = short_str
    decode.METHODS["timestamp"] = timestamp
    decode.METHODS["table"] = field_table
    decode.TABLE_MAPPING[b"T"] = timestamp
    decode.TABLE_MAPPING[b"F"] = field_table
