"""The consumer's frame reading (reading.py) gives what aiormq and pamqp give, faster.

Each replacement is run beside the code it replaces, on the same bytes: the direct decoders
against pamqp's own, the buffered receiver against aiormq's, split into reads at any point.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from aiormq.exceptions import AMQPConnectionError, InvalidFrameError, ProtocolSyntaxError
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header, heartbeat
from pamqp.commands import Basic
from pamqp.exceptions import UnmarshalingException

from jobq.config import ConnectConfig
from jobq.transports.rabbitmq import frames, reading
from jobq.transports.rabbitmq.connect import RabbitLink

AiormqReceiver = reading.BufferedFrameReceiver.__mro__[1]  # aiormq's own
assert reading._PAMQP_METHOD is not None and reading._PAMQP_HEADER is not None
PAMQP_METHOD, PAMQP_HEADER = reading._PAMQP_METHOD, reading._PAMQP_HEADER
frames.install()  # pamqp's side decodes totally too, as it does in a jobq process

short = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
exchanges = st.from_regex(r"\A[a-zA-Z0-9_.:-]{0,40}\Z")  # what pamqp lets an exchange be named
header_values = st.one_of(st.integers(-2**31, 2**31 - 1), st.text(max_size=30), st.booleans())
properties = st.fixed_dictionaries({}, optional={
    "content_type": short, "content_encoding": short,
    "headers": st.dictionaries(st.text(min_size=1, max_size=20), header_values, max_size=6),
    "delivery_mode": st.sampled_from([1, 2]), "priority": st.integers(0, 255),
    "correlation_id": short, "reply_to": short, "expiration": st.from_regex(r"\A[0-9]{1,9}\Z"),
    "message_id": short,
    "timestamp": st.integers(0, 2**32 - 1).map(lambda s: datetime.fromtimestamp(s, tz=UTC)),
    "message_type": short, "user_id": short, "app_id": short})


def fields(value: Any) -> dict[str, Any]:
    """Every attribute pamqp gives a frame object (and its properties'), for comparison."""
    out = {name: getattr(value, name, None) for name in getattr(value, "__slots__", ())}
    for name in ("class_id", "weight", "body_size"):
        if hasattr(value, name):
            out[name] = getattr(value, name)
    if isinstance(getattr(value, "properties", None), Basic.Properties):
        out["properties"] = fields(value.properties)
    return {k: (bytes(v), str(v)) if isinstance(v, frames.Undecodable) else v
            for k, v in out.items()}


def payload(raw: bytes) -> bytes:
    """A marshalled frame's payload: what the frame decoders are given."""
    return raw[7:-1]


@settings(max_examples=300, deadline=None)
@given(tag=short, delivery_tag=st.integers(0, 2**63 - 1), redelivered=st.booleans(),
       exchange=exchanges, routing_key=short)
def test_a_deliver_is_decoded_as_pamqp_decodes_it(tag: str, delivery_tag: int, redelivered: bool,
                                                   exchange: str, routing_key: str) -> None:
    data = payload(frame.marshal(Basic.Deliver(tag, delivery_tag, redelivered, exchange,
                                               routing_key), 1))
    ours = reading.method_frame(data)
    assert type(ours) is Basic.Deliver
    assert fields(ours) == fields(PAMQP_METHOD(data))


@settings(max_examples=300, deadline=None)
@given(props=properties, size=st.integers(0, 2**63))
def test_a_content_header_is_decoded_as_pamqp_decodes_it(props: dict[str, Any], size: int) -> None:
    data = payload(frame.marshal(header.ContentHeader(0, size, Basic.Properties(**props)), 1))
    ours = reading.header_frame(data)
    assert type(ours) is header.ContentHeader
    assert fields(ours) == fields(PAMQP_HEADER(data))


def test_what_pamqp_cannot_decode_is_an_undecodable_as_in_frames() -> None:
    deliver = payload(frame.marshal(Basic.Deliver("ctag", 7, False, "", "rk"), 1))
    bad_tag = deliver.replace(b"\x04ctag", b"\x04c\xfftg")
    assert isinstance(reading.method_frame(bad_tag).consumer_tag, frames.Undecodable)
    assert fields(reading.method_frame(bad_tag)) == fields(PAMQP_METHOD(bad_tag))
    raw = payload(frame.marshal(header.ContentHeader(0, 2, Basic.Properties(
        message_id="abc", timestamp=datetime(2000, 1, 1, tzinfo=UTC))), 1))
    bad_id = raw.replace(b"\x03abc", b"\x03a\xffc")
    never = raw[:-8] + b"\xff" * 8  # the timestamp is the last property set here
    for data, name in ((bad_id, "message_id"), (never, "timestamp")):
        ours = reading.header_frame(data)
        assert isinstance(getattr(ours.properties, name), frames.Undecodable)
        assert fields(ours) == fields(PAMQP_HEADER(data))


def outcome(decode: Any, data: bytes) -> Any:
    try:
        return fields(decode(data))
    except UnmarshalingException:
        return "raised"


def test_truncated_frames_end_as_pamqp_ends_them() -> None:
    # Cut anywhere: raised where pamqp raises, and where it does not (a last string cut short
    # is read as what is there), the same fields.
    deliver = payload(frame.marshal(Basic.Deliver("ctag", 7, True, "ex", "rk"), 1))
    content = payload(frame.marshal(header.ContentHeader(0, 2, Basic.Properties(
        message_id="abc", headers={"a": 1}, delivery_mode=2, app_id="app")), 1))
    for cut in range(4, len(deliver)):
        assert outcome(reading.method_frame, deliver[:cut]) == outcome(PAMQP_METHOD, deliver[:cut])
    for cut in range(14, len(content)):
        assert outcome(reading.header_frame, content[:cut]) == outcome(PAMQP_HEADER, content[:cut])
    assert outcome(reading.method_frame, deliver[:10]) == "raised"


def test_other_methods_and_classes_go_to_pamqp() -> None:
    ack = payload(frame.marshal(Basic.Ack(5, multiple=True), 1))
    assert fields(reading.method_frame(ack)) == fields(PAMQP_METHOD(ack))
    second_flag_word = bytearray(payload(frame.marshal(header.ContentHeader(
        0, 1, Basic.Properties(message_id="x")), 1)))
    second_flag_word[13] |= 1  # the continuation bit: left to pamqp
    with pytest.raises(UnmarshalingException):  # pamqp reads a second word that is not there
        reading.header_frame(bytes(second_flag_word))


STREAM = b"".join((
    frame.marshal(commands.Connection.Tune(2047, 131072, 60), 0),
    frame.marshal(Basic.Deliver("ctag", 1, False, "", "q"), 1),
    frame.marshal(header.ContentHeader(0, 5, Basic.Properties(message_id="1", headers={"a": 1})),
                  1),
    frame.marshal(body.ContentBody(b"hello"), 1),
    frame.marshal(heartbeat.Heartbeat(), 0),
    frame.marshal(Basic.Deliver("ctag", 2, True, "", "q"), 1),
    frame.marshal(header.ContentHeader(0, 0, Basic.Properties()), 1),
    frame.marshal(body.ContentBody(bytes(range(256)) * 700), 1),  # 179,200 bytes: over a read
))


async def received(receiver_class: type, chunks: list[bytes], count: int, *,
                   then_eof: bool = False) -> tuple[list[Any], BaseException | None]:
    """``count`` frames read from ``chunks`` fed one by one, and what the next read raised
    (the stream ended first if ``then_eof``, else ending while it waits)."""
    reader = asyncio.StreamReader()
    receiver = receiver_class(reader)

    async def feed() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0)

    feeding = asyncio.create_task(feed())
    got: list[Any] = []
    for _ in range(count):
        weight, channel, value = await receiver.get_frame()
        got.append((weight, channel, type(value).__name__, fields(value)))
    await feeding
    if then_eof:
        reader.feed_eof()
    else:
        asyncio.get_running_loop().call_later(0.01, reader.feed_eof)
    try:
        await receiver.get_frame()
    except BaseException as exc:  # compared between the two receivers
        return got, exc
    return got, None


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_the_buffered_receiver_hands_out_what_aiormqs_does_however_the_bytes_arrive(
        cuts: list[int]) -> None:
    chunks = split(STREAM, cuts)
    ours, _ = asyncio.run(received(reading.BufferedFrameReceiver, chunks, 8, then_eof=True))
    theirs, _ = asyncio.run(received(AiormqReceiver, chunks, 8, then_eof=True))
    assert ours == theirs and len(ours) == 8


@pytest.mark.parametrize("receiver", [reading.BufferedFrameReceiver, AiormqReceiver])
def test_the_buffered_receiver_ends_and_fails_as_aiormqs_does(receiver: type) -> None:
    # The stream ended, every frame handed out: the end of the iteration.
    _, error = asyncio.run(received(receiver, [STREAM], 8, then_eof=True))
    assert isinstance(error, StopAsyncIteration)
    # It ends while a frame is awaited, at a frame's start or in its middle (the large one,
    # read in one piece): a lost connection.
    _, error = asyncio.run(received(receiver, [STREAM], 8))
    assert isinstance(error, AMQPConnectionError)
    _, error = asyncio.run(received(receiver, [STREAM[:-3]], 7))
    assert isinstance(error, AMQPConnectionError)
    # A frame without its end byte.
    broken = frame.marshal(Basic.Ack(1), 1)[:-1] + b"\x00"
    _, error = asyncio.run(received(receiver, [broken], 0))
    assert isinstance(error, InvalidFrameError)


def test_a_broker_that_speaks_another_protocol_version_is_told() -> None:
    # The broker answers a protocol header it does not speak with its own.
    _, error = asyncio.run(received(reading.BufferedFrameReceiver, [b"AMQP\x00\x00\x09\x01"], 0))
    assert isinstance(error, ProtocolSyntaxError)


def test_every_jobq_connection_reads_this_way_with_the_installed_libraries() -> None:
    # A later aiormq or pamqp without what is replaced makes install a no-op: slower, not
    # wrong. This fails then, so that the upgrade is seen.
    RabbitLink("amqp://guest:guest@127.0.0.1:5672/", ConnectConfig(), role="test")
    assert reading.installed()
