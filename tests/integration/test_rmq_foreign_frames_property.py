"""Property test (Hypothesis) of docs/wire-format.md on the real RabbitMQ: arbitrary frames, as
any AMQP client can publish them, beside good jobs (issue 37).

Each example declares a fresh queue (`jobq init`), publishes good jobs with jobq's own
publisher, then messages from a raw AMQP channel (aiormq, under aio-pika: nothing rewrites
them) whose every property holds a value the protocol admits (message_id, type, timestamp,
priority, expiration, content type and encoding, delivery mode, correlation_id, reply_to,
user_id, app_id), whose header table holds values of every field type pamqp encodes (booleans,
integers of every width, 32-bit floats with their infinities and NaN, decimals, strings, byte
arrays, times, nested tables and arrays, void), jobq's own headers among them with wrong types
and out-of-range values, and whose body is any bytes (not UTF-8, JSON that is not an object,
empty, over limits.max_payload); then more good jobs; then runs a real ``consumer --once``.
Then:

- a publish either went in, or the broker refused it (a user_id that is not the login's, an
  expiration that is not a number of milliseconds: the channel is closed, nothing is stored);
- the consumer exits 0 and every good job ran exactly once;
- every foreign message that went in ran once, or is dead with its reason (`jobq dead list`),
  by the rules: a body that is not a JSON object, no message_id or type (no opt-in), a counter
  or time header of the wrong type or range is dead unrun (``MalformedJob``); an attempt over
  max_attempts is dead unrun; a valid due time far ahead waits in the retry tiers (counted by
  `jobq stats` as retry), unrun: due times are drawn in the past or at least a day ahead, so
  the test never waits; an expiration the broker acts on first is dead ("dead-lettered by
  RabbitMQ: expired"); nothing is left ready or unacked, nothing is dropped;
- the admin's views (`jobq stats`, `jobq dead list`, `jobq jobs list --state dead`, `jobq jobs
  show` of every dead one) read it all.

Why Hypothesis: it draws each property and header from the whole space its AMQP type admits,
combines them, and keeps a failing example small, which hand-written generators would do worse.
The budget is fixed and the draws derandomised, so `make test` runs the same few examples each
time, in seconds; the ``@example``s hold the classes of value that broke something before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiormq
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from pamqp.commands import Basic

from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.port import NewJob
from tests.conftest import AMQP_URL, ROOT
from tests.contract.backends import Backend, rabbit_backend
from tests.processors import completions

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ~20 s: started first

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
shortstrs = texts | st.just("") | st.just("k" * 200) | st.just("k" * 201)
times = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.just(UTC))
scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.sampled_from([0, 1, -1, 127, 128, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31,
                              2**32 - 1, 2**32, 2**63 - 1, -(2**63)])
           | st.floats(width=32) | st.sampled_from([Decimal("1.5"), Decimal("-0.001"), Decimal("7")])
           | texts | st.binary(max_size=8).map(bytearray) | times)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(texts, inner, max_size=3), max_leaves=6)
# jobq's own headers: the right type in and out of range, and every other type.
counters = st.sampled_from([1, 2, 5, 0, -1, 2**31 - 1, 2**63 - 1, "3", 1.0, True]) | values
dues = st.sampled_from([NOW_MS - DAY_MS, 0, NOW_MS + 30 * DAY_MS, 2**62, -(2**62), str(NOW_MS),
                        float(NOW_MS), True]) | values
OWN: dict[str, st.SearchStrategy[Any]] = {
    "x-jobq-attempt": counters, "x-jobq-max-attempts": counters, "x-jobq-due": dues,
    "x-jobq-enqueued-at": dues | st.just(time.time()), "x-jobq-isolate": counters,
    "x-jobq-suspect": counters, "x-jobq-redelivered": counters, "x-delivery-count": counters,
    "x-jobq-errors": values | st.just('[{"attempt": 1e400}]') | st.just("[1, 2"),
}
headers = st.lists(st.sampled_from(list(OWN)), max_size=3, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: OWN[n] for n in names})).flatmap(
    lambda own: st.dictionaries(texts, values, max_size=3).map(lambda user: {**user, **own}))
bodies = (st.binary(max_size=16) | st.just(b"") | st.just(b"\xff\xfe{}") | st.just(b"{}")
          | st.just(b'{"n": ' + b"9" * 5000 + b"}") | st.just(b'{"pad": "' + b"x" * 1_100_000 + b'"}')
          | st.just(b'{"a": 1}') | st.just(b"[1]") | st.just(b"null") | st.just(b'"text"'))
PROPERTIES: dict[str, st.SearchStrategy[Any]] = {
    "message_type": shortstrs, "timestamp": times, "priority": st.integers(0, 255),
    "expiration": st.sampled_from(["", "60000", "0", "soon", "-1"]),
    "content_type": shortstrs, "content_encoding": shortstrs, "delivery_mode": st.integers(0, 255),
    "correlation_id": shortstrs, "reply_to": shortstrs, "app_id": shortstrs,
    "user_id": st.sampled_from(["guest", "someone-else", ""]), "headers": headers,
}
# A message: an id of its own (or none, or empty), a few properties, a body. Most have a kind
# and an object body, so that the rest of what they carry is what decides their fate.
frames = st.fixed_dictionaries({
    "id": st.sampled_from(["mine", "mine", "mine", "none", "empty"]),
    "body": st.sampled_from([b"{}", b'{"a": [1, null]}']) | bodies,
    "props": st.tuples(st.booleans(), st.lists(
        st.sampled_from(list(PROPERTIES)), max_size=5, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: PROPERTIES[n] for n in names}))).map(
        lambda kept: {"message_type": "foreign", **kept[1]} if kept[0] else kept[1]),
})


@dataclass
class Sent:
    """A foreign message and what became of its publish."""

    message_id: str | None
    body: bytes
    props: dict[str, Any]
    refused: str | None = None


def message_id(frame: dict[str, Any], index: int) -> str | None:
    return {"mine": f"f{index}", "none": None, "empty": ""}[frame["id"]]


async def publish_foreign(queue: str, frames_: list[dict[str, Any]]) -> list[Sent]:
    """Publish each frame on a raw connection of its own, with confirms. The broker refuses some
    by closing the channel (a user_id not the login's, an expiration not a number, a delivery
    mode not 1 or 2) or the connection (a NaN in a header: INTERNAL_ERROR)."""
    return [await publish_one(queue, message_id(frame, index), frame)
            for index, frame in enumerate(frames_)]


class Nameless(Basic.Properties):
    """Properties sent with the message_id asked for: aiormq gives a message without one (or
    with an empty one) a random id before marshalling, which a foreign client may not."""

    sent_id: str | None = None

    def marshal(self) -> bytes:
        self.message_id = self.sent_id
        return super().marshal()


async def publish_one(queue: str, job_id: str | None, frame: dict[str, Any]) -> Sent:
    one = Sent(job_id, frame["body"], frame["props"])
    fields = dict(frame["props"])
    mode = fields.pop("delivery_mode", None)
    props = Nameless(message_id=job_id or "set-by-marshal", **fields)
    props.sent_id = job_id
    props.delivery_mode = mode  # any octet: pamqp's constructor admits only 1 and 2
    connection = await asyncio.wait_for(aiormq.connect(AMQP_URL), 10)
    try:
        channel = await asyncio.wait_for(connection.channel(publisher_confirms=True), 10)
        confirm = await asyncio.wait_for(channel.basic_publish(
            one.body, exchange="jobq", routing_key=queue, properties=props, mandatory=True), 10)
        if not isinstance(confirm, Basic.Ack):
            one.refused = repr(confirm)
    except aiormq.exceptions.AMQPError as exc:
        one.refused = repr(exc)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 5)
    return one


async def publish_good(queue: str, count: int) -> list[str]:
    config = load_settings(ROOT / "configs" / "rabbitmq.yaml", {
        "rabbitmq.url": AMQP_URL, "queue": queue}, env={})
    async with connect_publisher(config) as publisher:
        return [await publisher.enqueue(NewJob(kind="good", payload={"n": i})) for i in range(count)]


def must_die(one: Sent) -> str | None:
    """The reason docs/wire-format.md gives for a message that never runs, as far as this oracle
    tells it (other messages may run or die, each with a reason)."""
    head = one.props.get("headers") or {}
    attempt, most = head.get("x-jobq-attempt"), head.get("x-jobq-max-attempts")
    due = head.get("x-jobq-due")
    if not one.message_id or not one.props.get("message_type"):
        return "MalformedJob: message has no"
    if one.body[:1] != b"{":
        return "MalformedJob: body"
    if due is not None and not (type(due) is int and -62_135_510_400_000 <= due <= 253_402_128_000_000):
        return "MalformedJob: header x-jobq-due"
    if type(attempt) is int and type(most) is int and 1 <= most < attempt:
        return f"attempt {attempt} is over max_attempts {most}"
    return None


def waits(one: Sent) -> bool:
    """A valid due time ahead: it waits in the tiers (if nothing else kills it)."""
    due = (one.props.get("headers") or {}).get("x-jobq-due")
    return type(due) is int and NOW_MS + DAY_MS <= due <= 253_402_128_000_000


# No shrinking or explaining: each example costs a consumer run; a failure prints its frames.
@settings(max_examples=12, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(foreign=st.lists(frames, min_size=3, max_size=8))
@example(foreign=[  # each class of value that broke something before, or might
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-jobq-attempt": 2**63 - 1, "x-jobq-max-attempts": 2**63 - 1}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-jobq-attempt": 7, "x-jobq-max-attempts": 3}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-jobq-due": NOW_MS + 30 * DAY_MS}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-jobq-due": float(NOW_MS), "x-jobq-enqueued-at": True}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-delivery-count": 3, "x-jobq-isolate": 1}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "x-jobq-suspect": 1, "x-jobq-redelivered": "yes", "x-jobq-errors": "[1, 2"}}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "priority": 255,
                                            "delivery_mode": 0, "expiration": "60000"}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "headers": {
        "h": {"n": [1, None, Decimal("1.5"), bytearray(b"\xff")]}, "t": datetime(1970, 1, 2, tzinfo=UTC),
        "f": float("nan"), "z": None}}},
    {"id": "mine", "body": b"\xff\xfe{}", "props": {"message_type": "x"}},
    {"id": "none", "body": b"{}", "props": {}},
    {"id": "empty", "body": b"[1]", "props": {"message_type": ""}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "user_id": "someone-else"}},
    {"id": "mine", "body": b"{}", "props": {"message_type": "x", "expiration": "soon"}},
])
def test_arbitrary_frames_beside_good_jobs(amqp_url: str, tmp_path_factory: Any,
                                           foreign: list[dict[str, Any]]) -> None:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    records = tmp_path_factory.mktemp("records")
    rabbit = rabbit_backend(queue)
    try:
        check(rabbit, records, foreign)
    finally:
        rabbit.cleanup()


def check(rabbit: Backend, records: Path, foreign: list[dict[str, Any]]) -> None:
    goods = asyncio.run(publish_good(rabbit.queue, 2))
    sent = asyncio.run(publish_foreign(rabbit.queue, foreign))
    goods += asyncio.run(publish_good(rabbit.queue, 2))
    stored = [one for one in sent if one.refused is None]
    event(f"{len(sent) - len(stored)} of {len(sent)} refused")
    result = rabbit.run("consumer", "--once", "-n", "3", "-p", "tests.processors:record",
                        "--processor-arg", f"directory={records}", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lost the RabbitMQ session" not in result.stderr, result.stderr[-3000:]
    ran = completions(records)
    dead = {row["id"]: row for row in rabbit.dead()}
    for job_id in goods:
        assert ran.count(job_id) == 1 and job_id not in dead, job_id
    for one in [one for one in sent if one.refused is not None]:
        assert one.message_id is None or (one.message_id not in ran and one.message_id not in dead)
    waiting = 0
    for one in [one for one in stored if one.message_id]:
        reason, job_id = must_die(one), one.message_id
        row = dead.get(job_id)
        if row is not None:
            assert ran.count(job_id) == 0 and row["last_error"], (one, row)
            # An expiration is the producer's: the broker may dead-letter it first ("expired").
            expired = "expiration" in one.props and row["last_error"].startswith(
                "dead-lettered by RabbitMQ: expired")
            assert reason is None or expired or row["last_error"].startswith(reason) or (
                reason.startswith("MalformedJob") and row["last_error"].startswith("MalformedJob")
            ), (one, row["last_error"], reason)
            event(f"dead: {row['last_error'].split(':')[0]}")
        elif waits(one):
            assert ran.count(job_id) == 0, one
            waiting += 1
            event("waits")
        else:
            assert reason is None, (one, reason)
            assert ran.count(job_id) == 1, (one, ran.count(job_id))
            event("ran")
    # A message without an id (no opt-in) is dead under an id jobq gave it, never run.
    known = {one.message_id for one in stored if one.message_id} | set(goods)
    nameless = [one for one in stored if not one.message_id]
    strangers = {i: dead[i]["last_error"] for i in dead if i not in known}
    assert len(strangers) == len(nameless), (len(nameless), strangers, [
        (one.message_id, one.refused, one.body[:20], one.props.get("expiration")) for one in sent],
        [(r["id"], r["last_error"][:60]) for r in rabbit.dead()], ran, rabbit.depth())
    assert not [i for i in ran if i not in known], ran
    depth = rabbit.depth()
    assert (depth["ready"], depth["retry"]) == (0, waiting), depth
    for job_id in [i for i in dead if i]:  # one the broker expired before jobq named it has none
        assert rabbit.look("jobs", "show", job_id)["state"] == "dead"
    assert len(rabbit.look("jobs", "list", "--state", "dead", "--limit", "1000")) == len(dead)
