"""Frames another publisher can make undecodable cost that message, never the connection.

pamqp raises on a timestamp past year 9999, a short string or table field name that is not
UTF-8; aiormq then closes the whole connection. ``frames.install`` makes those decoders total,
and the codec turns what they return into the reason the delivery is dead-lettered.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, decode, encode, frame, header
from pamqp.commands import Basic
from pamqp.exceptions import UnmarshalingException

from jobq.transports.rabbitmq import frames, reading
from jobq.transports.rabbitmq.codec import decode as decode_message
from jobq.transports.rabbitmq.codec import republish

MAX_STAMP = b"\xff" * 8  # 2^64-1, as another client may send it
PLACEHOLDER = datetime(2000, 1, 1, tzinfo=UTC)
PACKED = struct.pack(">Q", int(PLACEHOLDER.timestamp()))


def crafted(old: bytes, new: bytes, **fields: Any) -> bytes:
    """A content header frame for ``fields`` with the bytes ``old`` replaced by ``new``."""
    raw = frame.marshal(header.ContentHeader(0, 2, Basic.Properties(**fields)), 1)
    assert raw.count(old) == 1
    return raw.replace(old, new)


POISON = {  # what the broker passes through as it got it, and the reason it must end with
    "timestamp": (crafted(PACKED, MAX_STAMP, message_id="7", message_type="demo",
                          timestamp=PLACEHOLDER),
                  "timestamp 18446744073709551615 is out of range"),
    "message_id": (crafted(b"MIDMID", b"\xff" * 6, message_id="MIDMID", message_type="demo"),
                   "message_id is not UTF-8 (invalid start byte at byte 0: b'\\xff\\xff\\xff"
                   "\\xff\\xff\\xff')"),
    "type": (crafted(b"KINDKIND", b"\xc3" * 8, message_id="7", message_type="KINDKIND"),
             "type (the job kind) is not UTF-8 (invalid continuation byte at byte 0: "
             "b'\\xc3\\xc3\\xc3\\xc3\\xc3\\xc3\\xc3\\xc3')"),
    "header name": (crafted(b"\x04KEYX", b"\x04\xff\xfeKX", message_id="7", message_type="demo",
                            headers={"KEYX": "v", "x-jobq-attempt": 1}),
                    "headers cannot be decoded: a header name is not UTF-8 (b'\\xff\\xfeKX')"),
}


@pytest.fixture(autouse=True)
def installed() -> None:
    frames.install()


def properties(raw: bytes) -> Basic.Properties:
    _, _, content = frame.unmarshal(raw)
    assert isinstance(content, header.ContentHeader)
    return content.properties


@pytest.mark.parametrize("field", list(POISON))
def test_pamqp_alone_raises_on_each_poison_frame(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # What closed the connection before: aiormq turns this into InvalidFrameError.
    for name, original in (("shortstr", decode.short_str), ("timestamp", decode.timestamp),
                           ("table", decode.field_table)):
        monkeypatch.setitem(decode.METHODS, name, original)
    monkeypatch.setitem(decode.TABLE_MAPPING, b"T", decode.timestamp)
    monkeypatch.setitem(decode.TABLE_MAPPING, b"F", decode.field_table)
    # and pamqp's own frame decoders, if reading.install put its own in place in this process
    monkeypatch.setattr(frame, "_unmarshal_header_frame", reading._PAMQP_HEADER)
    monkeypatch.setattr(frame, "_unmarshal_method_frame", reading._PAMQP_METHOD)
    with pytest.raises(UnmarshalingException):
        frame.unmarshal(POISON[field][0])


@pytest.mark.parametrize("field", list(POISON))
def test_each_poison_frame_decodes_into_a_malformed_job_with_its_reason(field: str) -> None:
    raw, reason = POISON[field]
    props = properties(raw)
    job, problem = decode_message(b"{}", props, queue="q", max_attempts=3, fallback_id="amqp-1")
    assert problem == reason
    assert job.id in {"7", "amqp-1"}


@pytest.mark.parametrize("field", list(POISON))
def test_the_dead_letter_copy_is_a_message_every_client_can_read(field: str) -> None:
    props = properties(POISON[field][0])
    body, copy = republish(b"{}", props, {"x-jobq-error": "MalformedJob: ..."})
    again = properties(frame.marshal(header.ContentHeader(0, len(body), copy), 1))
    frames_free = [again.message_id, again.message_type, again.timestamp, again.headers]
    assert not any(isinstance(value, frames.Undecodable) for value in frames_free)
    assert again.headers is not None and again.headers["x-jobq-error"] == "MalformedJob: ..."


def test_a_timestamp_out_of_range_inside_the_headers_is_kept_as_bytes() -> None:
    raw = crafted(PACKED, MAX_STAMP, message_id="7", message_type="demo",
                  headers={"sent": PLACEHOLDER})
    props = properties(raw)
    stamp = props.headers["sent"]
    assert isinstance(stamp, frames.Undecodable) and bytes(stamp) == MAX_STAMP
    job, problem = decode_message(b"{}", props, queue="q", max_attempts=3, fallback_id="amqp-1")
    assert problem is None and job.headers == {"sent": "timestamp 18446744073709551615 is out of range"}
    _, copy = republish(b"{}", props, {})
    assert properties(frame.marshal(header.ContentHeader(0, 2, copy), 1)).headers == {
        "sent": bytearray(MAX_STAMP)}


def test_a_routing_key_that_is_not_utf8_no_longer_breaks_the_deliver_frame() -> None:
    # Routed by a CC header, a message keeps the routing key it was published with.
    deliver = commands.Basic.Deliver("ctag", 1, False, "jobq", "RKRK")
    raw = frame.marshal(deliver, 1).replace(b"RKRK", b"\xff" * 4)
    _, _, value = frame.unmarshal(raw)
    assert isinstance(value, commands.Basic.Deliver) and bytes(value.routing_key) == b"\xff" * 4


def test_a_longstr_header_that_is_not_utf8_can_be_sent_again() -> None:
    # pamqp decodes it as bytes, which it cannot encode: the retry copy would fail for ever.
    raw = crafted(b"VALUEV", b"\xff" * 6, message_id="7", message_type="demo",
                  headers={"h": "VALUEV"})
    _, copy = republish(b"{}", properties(raw), {})
    assert properties(frame.marshal(header.ContentHeader(0, 2, copy), 1)).headers == {
        "h": bytearray(b"\xff" * 6)}


def test_truncated_data_still_raises() -> None:
    for decoder, data in ((frames.short_str, b""), (frames.timestamp, b"\x00" * 7),
                          (frames.field_table, b"\x00\x00"), (frames.field_table, b"\x00\x00\x00\x09ab")):
        with pytest.raises(ValueError):
            decoder(data)


values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20)
    | st.datetimes(min_value=datetime(1970, 1, 2), timezones=st.just(UTC)).map(
        lambda d: d.replace(microsecond=0)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


@given(st.dictionaries(st.text(max_size=10), values, max_size=5))
def test_what_pamqp_can_decode_decodes_the_same(table: dict[str, Any]) -> None:
    data = encode.field_table(table)
    assert frames.field_table(data) == decode.field_table(data)


@given(st.binary(min_size=8, max_size=8))
def test_every_timestamp_decodes_as_pamqp_does_or_into_its_bytes(data: bytes) -> None:
    ours = frames.timestamp(data)
    try:
        assert ours == decode.timestamp(data)
    except (ValueError, OverflowError, OSError):
        assert ours == (8, bytearray(data))


@given(st.binary(max_size=40))
def test_every_short_string_decodes_as_pamqp_does_or_into_its_bytes(text: bytes) -> None:
    data = bytes([len(text)]) + text
    ours = frames.short_str(data)
    try:
        assert ours == decode.short_str(data)
    except ValueError:
        assert ours == (len(data), bytearray(text))
