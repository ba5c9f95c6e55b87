"""What a RabbitMQ cluster with a node down answers, and what jobq does with it.

Found by the cluster harness (faults/cluster, `make cluster`), each failing before its fix:

- a classic queue (the pause flag, the tombstones) whose node is down answers its declare with
  NOT_FOUND "home node ... is down or inaccessible" and closes the channel: every consumer's
  session declare failed, and no consumer could start again until that node came back;
- the pause flag's look read that NOT_FOUND as "no flag", so a paused queue would resume;
- a quorum queue between leaders confirms publishes negatively: a crash copy nacked was handed
  back at once, came straight back, and after 20 rounds the broker dead-lettered a job that
  never failed (delivery limit); the publisher raised on the first nack, and the producer's
  channel went on being refused.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiormq
import pytest
from pamqp.commands import Basic

from jobq.config import ConnectConfig, RabbitConfig
from jobq.core.errors import TransportError
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.copies import Copier, CopyTimeout
from jobq.transports.rabbitmq.probe import ReadyCount
from jobq.transports.rabbitmq.topology import Topology

DOWN = ("NOT_FOUND - home node 'n1@localhost' of durable queue 'q.paused' in vhost '/' is down "
        "or inaccessible")


def node_down_error() -> aiormq.exceptions.ChannelNotFoundEntity:
    return aiormq.exceptions.ChannelNotFoundEntity(DOWN)


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name
        self.declaration_result = SimpleNamespace(message_count=0)

    async def bind(self, *_args: Any, **_kwargs: Any) -> None:
        return None


class Channel:
    """A channel of a cluster in which the queues in ``down`` are on a dead node."""

    def __init__(self, down: set[str], log: list[str]) -> None:
        self.down, self.log = down, log
        self.is_closed = False

    async def declare_exchange(self, name: str, *_args: Any, **_kwargs: Any) -> None:
        self.log.append(f"exchange {name}")

    async def declare_queue(self, name: str, **_kwargs: Any) -> Queue:
        if self.is_closed:
            raise aiormq.exceptions.ChannelInvalidStateError("channel closed")
        if name in self.down:
            self.is_closed = True  # as the broker does with a channel error
            raise node_down_error()
        self.log.append(f"queue {name}")
        return Queue(name)

    async def close(self) -> None:
        self.is_closed = True


def topology() -> Topology:
    return Topology.configured(RabbitConfig(), "q")


async def test_a_consumer_declares_past_classic_queues_whose_node_is_down() -> None:
    log: list[str] = []
    down = {"q.paused", "q.cancelled"}
    main = Channel(down, log)

    async def aside() -> Any:
        return Channel(down, log)

    missing = await topology().declare_consuming(main, aside)  # type: ignore[arg-type]
    assert missing == ["q.paused", "q.cancelled"]
    assert not main.is_closed  # the consume channel was never hit by their errors
    assert "queue q" in log and "queue q.alone" in log and "queue q.dead" in log


async def test_other_not_found_errors_still_fail_the_declare() -> None:
    class Gone(Channel):
        async def declare_queue(self, name: str, **_kwargs: Any) -> Queue:
            if name == "q.cancelled":
                raise aiormq.exceptions.ChannelNotFoundEntity("NOT_FOUND - no queue 'x'")
            return Queue(name)

    async def aside() -> Any:
        return Gone(set(), [])

    with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
        await topology().declare_consuming(Gone(set(), []), aside)  # type: ignore[arg-type]


async def test_the_pause_look_does_not_read_a_dead_node_as_no_pause() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")

    async def channel(confirms: bool) -> Any:
        return Channel({"q.paused"}, [])

    link.channel = channel  # type: ignore[method-assign]
    with pytest.raises(TransportError, match="is down or inaccessible"):
        await ReadyCount(link, "q.paused", "rabbitmq pause flag")()


class Nacking:
    """A confirming channel that nacks the first ``nacks`` publishes."""

    def __init__(self, nacks: int) -> None:
        self.nacks, self.sent = nacks, 0

    async def basic_publish(self, *_args: Any, **_kwargs: Any) -> None:
        self.sent += 1
        if self.sent <= self.nacks:
            raise aiormq.exceptions.DeliveryError(None, None)  # type: ignore[arg-type]


async def test_a_nacked_copy_is_sent_again_until_confirmed() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    sender = Nacking(nacks=3)
    await Copier(link, timeout=5).send(sender, b"{}", Basic.Properties(message_id="1"),  # type: ignore[arg-type]
                                       exchange="", routing_key="q.alone")
    assert sender.sent == 4


async def test_a_copy_nacked_until_its_deadline_fails_as_a_timeout() -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    with pytest.raises(CopyTimeout, match="negative confirms"):
        await Copier(link, timeout=0.3).send(Nacking(nacks=10**6), b"{}",  # type: ignore[arg-type]
                                             Basic.Properties(message_id="1"), exchange="",
                                             routing_key="q.alone")


def test_the_publisher_sends_a_nacked_job_again_on_a_fresh_channel() -> None:
    from jobq.transports.rabbitmq.publisher import RabbitPublisher, _Round

    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    publisher = RabbitPublisher(link, RabbitConfig(), queue="q", max_attempts=3)
    done = _Round()
    publisher._sort(done, 0, aiormq.exceptions.DeliveryError(None, None), "q")  # type: ignore[arg-type]
    assert done.unsent == [0] and "negative confirm" in done.cause  # sent again, not raised
    returned = _Round()
    with pytest.raises(TransportError, match="no queue is bound"):  # unroutable stays final
        bounced = SimpleNamespace(delivery=Basic.Return(312, "NO_ROUTE", "jobq", "q"))
        publisher._sort(returned, 0, aiormq.exceptions.PublishError(bounced, None), "q")  # type: ignore[arg-type]


async def test_a_copy_refused_to_the_end_ends_as_copy_nacked_and_leaves_the_copier_unstuck() -> None:
    from jobq.transports.rabbitmq.copies import CopyNacked

    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    copier = Copier(link, timeout=0.3)
    with pytest.raises(CopyNacked):
        await copier.send(Nacking(nacks=10**6), b"{}", Basic.Properties(message_id="1"),  # type: ignore[arg-type]
                          exchange="", routing_key="q.alone")
    assert not copier.stuck  # refusals are not a dark link: releases are not failed at once


async def test_a_nack_from_a_bounded_work_queue_is_final_at_once() -> None:
    # limits.max_pending: the work queue nacks when full; the original goes back at once.
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    sender = Nacking(nacks=1)
    with pytest.raises(TransportError):
        await Copier(link, timeout=5, bounded="q").send(  # type: ignore[arg-type]
            sender, b"{}", Basic.Properties(message_id="1"), exchange="jobq", routing_key="q")
    assert sender.sent == 1


async def test_the_publisher_closes_the_channel_it_lets_go_of() -> None:
    from jobq.transports.rabbitmq.publisher import RabbitPublisher

    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    publisher = RabbitPublisher(link, RabbitConfig(), queue="q", max_attempts=3)
    channel = Channel(set(), [])
    publisher._channel = channel  # type: ignore[assignment]
    await publisher._drop_channel()
    assert channel.is_closed and publisher._channel is None


def test_a_batch_not_all_enqueued_in_time_names_the_accepted_ones() -> None:
    from jobq.core.errors import ConnectionLost
    from jobq.transports.rabbitmq.publisher import RabbitPublisher, _Round

    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    publisher = RabbitPublisher(link, RabbitConfig(), queue="q", max_attempts=3)
    err = publisher._unfinished("q", ["1", "2", "3"], [2], [], _Round(unsent=[2], cause="nack"), 5)
    assert isinstance(err, ConnectionLost) and err.accepted == ("1", "2")
