"""The RabbitMQ topology of one jobq queue, declared idempotently, with readable conflicts.

::

    exchange <exchange> (direct) --<q>--> <q>            work queue (quorum or classic)
    <q> --x-dead-letter-exchange--> <q>.dlx (fanout) --> <q>.dead   (classic)
    <q>.retry.<delay>  (classic, x-message-ttl) --x-dead-letter--> <exchange> --<q>--> <q>
    <q>.alone          crash copies, taken one at a time to run alone (see rmq alone)
    <q>.paused         (classic, at most one message) holds a message while the queue is paused
    <q>.cancelled      (classic, x-message-ttl 7 days) a tombstone per cancelled job (tombstones.py)

Delayed jobs and retries wait in per-delay tier queues rather than with a per-message TTL,
because an expired message only leaves a queue from its head: one long TTL would hold back every
shorter one behind it. A wait longer than a tier hops through several (``hop``), carrying its
due time in ``x-jobq-due``: the consumer sends a message that comes back early on to the next
tier, and holds one due in less than the shortest tier until its time (see rabbitmq.due).

The tiers are quorum queues with at-least-once dead-lettering, whatever the work queue's type.
A classic queue dead-letters at most once: a retry whose TTL expired while the work queue could
not take it (a quorum work queue still recovering after a broker restart; a full one) was
dropped, which the fault suite saw (10 of 50,000 jobs lost around a restart). A quorum tier
keeps the message until the work queue confirms it, and the broker tries again
(``dead_letter_worker_publisher_confirm_timeout``, minutes). A quorum work queue dead-letters
(``x-delivery-limit``) at least once too.

With ``limits.max_pending`` the work queue gets ``x-max-length`` and ``x-overflow:
reject-publish``: a publish to a full queue is confirmed negatively.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiormq
from aio_pika import ExchangeType
from aio_pika.abc import AbstractChannel, AbstractQueue

from jobq.config import RabbitConfig
from jobq.core.errors import ConfigError

_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<kind>queue|exchange) '(?P<name>[^']+)' "
    r"in vhost '[^']*': received (?P<received>.+?) but current is (?P<current>.+?)\"?$")

# A hop may overshoot the due time by this fraction of the wait, at most MAX_SLACK seconds:
# a 4.99 s wait takes the 5 s tier rather than four 1 s hops.
HOP_SLACK = 0.01
MAX_SLACK = 0.25
# At-least-once dead-lettering (quorum queues, RabbitMQ 3.10+) needs reject-publish overflow.
TOMBSTONE_TTL = 7 * 86400.0  # seconds a cancelled job's tombstone is kept (jobq jobs --help)
AT_LEAST_ONCE = {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}

# Which setting decides each argument jobq declares, and what to change to match.
_KEYS = {
    "x-queue-type": "rabbitmq.queue_type",
    "x-delivery-limit": "rabbitmq.delivery_limit",
    "x-message-ttl": "rabbitmq.retry_tiers",
    "x-dead-letter-exchange": "rabbitmq.exchange",
    "x-dead-letter-routing-key": "queue",
    "x-max-length": "limits.max_pending",
    "x-overflow": "limits.max_pending",
    "x-max-priority": "rabbitmq.max_priority",
    "x-dead-letter-strategy": "rabbitmq.queue_type",
    "type": "rabbitmq.exchange",
}


@dataclass(frozen=True, slots=True)
class Topology:
    """Names and arguments of the exchange and queues serving one jobq queue."""

    exchange: str
    queue: str
    queue_type: str = "quorum"
    tiers: tuple[float, ...] = (1.0, 5.0, 30.0, 300.0, 3600.0, 86400.0)
    delivery_limit: int = 0  # quorum only; 0: none
    max_pending: int = 0  # ready messages the work queue takes; 0: no limit
    dead_type: str = "classic"  # see dead_arguments
    max_priority: int = 0  # classic only: the work queue's x-max-priority; 0: none

    @classmethod
    def build(cls, *, exchange: str, queue: str, queue_type: str, tiers: Sequence[float],
              delivery_limit: int, max_pending: int = 0, dead_type: str = "classic",
              max_priority: int = 0) -> Topology:
        """A topology with the tiers sorted and de-duplicated."""
        return cls(exchange, queue, queue_type, tuple(sorted(set(tiers))), delivery_limit,
                   max_pending, dead_type, max_priority)

    @classmethod
    def configured(cls, settings: RabbitConfig, queue: str, max_pending: int = 0) -> Topology:
        """The topology of ``queue`` as ``settings`` (and ``limits.max_pending``) describe it."""
        return cls.build(exchange=settings.exchange, queue=queue, queue_type=settings.queue_type,
                         tiers=settings.retry_tiers, delivery_limit=settings.delivery_limit,
                         max_pending=max_pending, dead_type=settings.dead_queue_type,
                         max_priority=settings.max_priority)

    @property
    def dlx(self) -> str:
        """The fanout exchange that parks dead messages in ``dead``."""
        return f"{self.queue}.dlx"

    @property
    def dead(self) -> str:
        """The dead-letter queue."""
        return f"{self.queue}.dead"

    @property
    def alone(self) -> str:
        """The queue of crash copies, each taken with basic.get to run alone (see rmq alone)."""
        return f"{self.queue}.alone"

    @property
    def paused(self) -> str:
        """The pause flag: one message in it while the queue is paused (``jobq pause``)."""
        return f"{self.queue}.paused"

    @property
    def cancelled(self) -> str:
        """Tombstones of cancelled jobs (``jobq jobs cancel``), one message per job: tombstones.py."""
        return f"{self.queue}.cancelled"

    def queues(self) -> tuple[str, ...]:
        """Every queue serving this jobq queue (for tools that count or delete them all)."""
        return (self.queue, self.alone, self.paused, self.cancelled, self.dead,
                *(self.tier_name(d) for d in self.tiers))

    def tier_name(self, delay: float) -> str:
        """The retry tier queue holding messages for ``delay`` seconds."""
        return f"{self.queue}.retry.{delay:g}"

    def hop(self, wait: float) -> str | None:
        """The tier to wait in next for a job due in ``wait`` s; None when every tier is longer.

        The longest tier not longer than the wait, give or take HOP_SLACK of it: waits add up
        to the delay, hop by hop, never past it by more than the slack (each hop re-reads the
        due time, so hops do not add their errors up). None: straight to the work queue, whose
        consumer holds the message until it is due.
        """
        i = bisect.bisect_right(self.tiers, wait + min(MAX_SLACK, wait * HOP_SLACK))
        return self.tier_name(self.tiers[i - 1]) if i else None

    def work_arguments(self) -> dict[str, Any]:
        """Arguments of the work queue."""
        args: dict[str, Any] = {"x-queue-type": self.queue_type, "x-dead-letter-exchange": self.dlx}
        if self.queue_type == "quorum":
            if self.delivery_limit > 0:
                args["x-delivery-limit"] = self.delivery_limit
            args.update(AT_LEAST_ONCE)
        if self.max_pending > 0:
            args["x-max-length"] = self.max_pending
            args["x-overflow"] = "reject-publish"
        if self.max_priority > 0:
            args["x-max-priority"] = self.max_priority
        return args

    def alone_arguments(self) -> dict[str, Any]:
        """Arguments of the alone queue: the work queue's type and dead-lettering, no length cap
        (a crash copy must always find room)."""
        args: dict[str, Any] = {"x-queue-type": self.queue_type, "x-dead-letter-exchange": self.dlx}
        if self.queue_type == "quorum":
            if self.delivery_limit > 0:
                args["x-delivery-limit"] = self.delivery_limit
            args.update(AT_LEAST_ONCE)
        return args

    def dead_arguments(self) -> dict[str, Any]:
        """Arguments of the dead queue: classic by default, whatever the work queue's type.

        ``jobq dead list`` walks it with basic.get and returns what it does not take by
        closing its channel. RabbitMQ 4.0-4.2 count every such return against a quorum queue's
        delivery limit (20 by default since 4.0) and 4.3 still counts a channel close, so a
        quorum dead queue would drop a dead letter after about 20 listings. A classic queue has
        no delivery limit on any version; ``x-delivery-limit: -1`` (unlimited on 4.x) would mean
        0 on 3.x, where a negative limit drops a message after its first delivery.
        """
        return {"x-queue-type": self.dead_type}

    def paused_arguments(self) -> dict[str, Any]:
        """Arguments of the pause flag: classic whatever the work queue's type, one message.

        `jobq stats` reads the pause's time by taking the message and rejecting it back,
        which a quorum queue would count against its delivery limit. At most one message
        (the oldest dropped), so two `jobq pause` at once still leave one.
        """
        return {"x-queue-type": "classic", "x-max-length": 1}

    def cancelled_arguments(self) -> dict[str, Any]:
        """Arguments of the tombstones' queue: classic (every consumer walks it with basic.get
        and puts it all back, which a quorum queue would count against a delivery limit), each
        tombstone kept for TOMBSTONE_TTL."""
        return {"x-queue-type": "classic", "x-message-ttl": round(TOMBSTONE_TTL * 1000)}

    def tier_arguments(self, delay: float) -> dict[str, Any]:
        """Arguments of a retry tier: expire after ``delay`` and go back to the work queue,
        at least once (a quorum queue, whatever the work queue's type: see the module notes)."""
        return {"x-queue-type": "quorum", "x-message-ttl": round(delay * 1000),
                "x-dead-letter-exchange": self.exchange, "x-dead-letter-routing-key": self.queue,
                **AT_LEAST_ONCE}

    async def declare(self, channel: AbstractChannel) -> None:
        """Declare everything (idempotent); ConfigError naming the argument on a conflict.

        A conflict closes ``channel`` (that is how AMQP reports it): use a channel of its own.
        """
        await self.declare_replicated(channel)
        for _, declare in self._single_node():
            await declare(channel)

    async def declare_consuming(self, channel: AbstractChannel,
                                aside: Callable[[], Awaitable[AbstractChannel]]) -> list[str]:
        """What a consumer declares at each session: everything, but a queue that lives on one
        node (the classic ones) whose node is down is left out, and named in the list returned.

        In a cluster a classic queue is on one node; while that node is down the broker answers
        its declare with NOT_FOUND ("home node ... is down or inaccessible") and closes the
        channel. The work queue, its tiers and its crash copies are consumed on, so each
        classic queue is declared on a channel of its own (``aside``): the pause flag and the
        tombstones are then read as last known, and dead letters wait (docs/scaling.md).
        """
        await self.declare_replicated(channel)
        down: list[str] = []
        for name, declare in self._single_node():
            side = await aside()
            try:
                await declare(side)
            except aiormq.exceptions.ChannelNotFoundEntity as exc:
                if not node_down(exc):
                    raise
                down.append(name)
            finally:
                if not side.is_closed:
                    with contextlib.suppress(Exception):
                        await side.close()
        return down

    async def declare_replicated(self, channel: AbstractChannel) -> None:
        """The exchanges, the work queue, its crash copies and tiers, and a quorum dead queue."""
        with explained():
            exchange = await channel.declare_exchange(self.exchange, ExchangeType.DIRECT,
                                                      durable=True)
            await channel.declare_exchange(self.dlx, ExchangeType.FANOUT, durable=True)
            work = await channel.declare_queue(self.queue, durable=True,
                                               arguments=self.work_arguments())
            await work.bind(exchange, routing_key=self.queue)
            await channel.declare_queue(self.alone, durable=True, arguments=self.alone_arguments())
            for delay in self.tiers:
                await channel.declare_queue(self.tier_name(delay), durable=True,
                                            arguments=self.tier_arguments(delay))
        if self.dead_type == "quorum":
            await self._declare_dead(channel)

    def _single_node(self) -> list[tuple[str, Callable[[AbstractChannel], Awaitable[object]]]]:
        """The classic queues and their declares: the pause flag, the tombstones, a classic
        dead queue."""
        return [(self.paused, self.declare_paused), (self.cancelled, self._declare_cancelled),
                *([(self.dead, self._declare_dead)] if self.dead_type == "classic" else [])]

    async def _declare_cancelled(self, channel: AbstractChannel) -> None:
        with explained():
            await channel.declare_queue(self.cancelled, durable=True,
                                        arguments=self.cancelled_arguments())

    async def _declare_dead(self, channel: AbstractChannel) -> None:
        with explained():
            dead = await channel.declare_queue(self.dead, durable=True,
                                               arguments=self.dead_arguments())
            await dead.bind(self.dlx, routing_key="")

    async def declare_paused(self, channel: AbstractChannel) -> AbstractQueue:
        """Declare the pause flag (idempotent); its declare-ok counts the ready messages."""
        with explained():
            return await channel.declare_queue(self.paused, durable=True,
                                               arguments=self.paused_arguments())


@contextlib.contextmanager
def explained() -> Iterator[None]:
    """A declare's PRECONDITION_FAILED as the ConfigError of ``explain_conflict``."""
    try:
        yield
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise explain_conflict(exc) from exc


def node_down(exc: BaseException) -> bool:
    """True for the NOT_FOUND a cluster answers about a classic queue whose node is down."""
    return isinstance(exc, aiormq.exceptions.ChannelNotFoundEntity) and \
        "is down or inaccessible" in str(exc)


def explain_conflict(exc: BaseException) -> ConfigError:
    """A PRECONDITION_FAILED from a declare, as an error saying what differs and how to fix it."""
    text = str(exc.args[0] if exc.args else exc).strip()
    match = _INEQUIVALENT.search(text)
    if match is None:
        return ConfigError(f"RabbitMQ refused the topology: {text}", key="rabbitmq")
    arg, kind, name = match["arg"], match["kind"], match["name"]
    key = _KEYS.get(arg, "rabbitmq")
    if kind == "exchange":
        remedy = (f"either use another exchange name ({key}) or delete the existing exchange, "
                  f"then run `jobq init --transport=rabbitmq` again")
    elif name.endswith(".dead") and arg == "x-queue-type":
        key = "rabbitmq.dead_queue_type"
        return ConfigError(
            f"dead-letter queue {name!r} already exists with {arg} = {match['current']} (an "
            f"older jobq declared it like its work queue), but this config declares "
            f"{match['received']}: set {key}: quorum to keep it (on RabbitMQ 4.x also give it "
            f"an unlimited delivery limit, see docs/rabbitmq-versions.md), or move its messages "
            f"and delete it (`rabbitmqctl delete_queue {name}`), then run `jobq init "
            f"--transport=rabbitmq` again", key=key)
    elif name.endswith(".paused"):
        key = "queue"
        remedy = (f"jobq keeps the pause of queue {name[:-7]!r} in it (one message while paused): "
                  f"if it is not jobq's, choose another queue name ({key}); if it is, delete it "
                  f"(`rabbitmqctl delete_queue {name}`; the queue is then not paused) and run "
                  "`jobq init --transport=rabbitmq` again")
    elif ".retry." in name:
        key = "rabbitmq.retry_tiers"
        remedy = (f"this retry tier was declared by an older jobq (tiers are now quorum queues "
                  f"that dead-letter at least once): once it is empty (`rabbitmqctl list_queues "
                  f"name messages`), delete it (`rabbitmqctl delete_queue {name}`) and run "
                  f"`jobq init --transport=rabbitmq` again")
    else:
        remedy = (f"either change {key} to match the existing queue, or delete the queue "
                  f"(`rabbitmqctl delete_queue {name}`; its messages are lost) and run "
                  f"`jobq init --transport=rabbitmq` again")
        if arg == "x-dead-letter-strategy":
            # jobq sets it on quorum work queues only: what really differs is the queue type.
            existing = "quorum" if "at-least-once" in match["current"] else "classic"
            wanted = "classic" if existing == "quorum" else "quorum"
            return ConfigError(
                f"queue {name!r} already exists as a {existing} queue (x-queue-type "
                f"'{existing}'; {arg} = {match['current']}), but this config declares a "
                f"{wanted} one: {remedy}", key=key)
    return ConfigError(
        f"{kind} {name!r} already exists with {arg} = {match['current']}, but this config "
        f"declares {arg} = {match['received']}: {remedy}", key=key)
