"""RabbitMQ administration: declare the topology, manage and prune ``<q>.dead``, depth by
state, pause.

The dead queue is walked with basic.get without acking: what is not chosen goes back when the
walking channel closes. AMQP does not expose a queue's unacked count, so ``depth`` reports
``unacked`` as None (unknown). The pause is a message in ``<q>.paused`` (see ``pausing``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import aiormq
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from jobq.config import RabbitConfig
from jobq.core.errors import ConfigError, NoSuchJob, TransportError
from jobq.core.port import JOB_STATES, DeadJob, Depth, JobInfo, PauseState
from jobq.transports.rabbitmq import frames
from jobq.transports.rabbitmq.codec import ATTEMPT, ERROR, republish
from jobq.transports.rabbitmq.connect import RabbitLink, short_channel, translated
from jobq.transports.rabbitmq.dead_rows import DEAD_HEADERS, as_info, dead_at, dead_row
from jobq.transports.rabbitmq.management import Management
from jobq.transports.rabbitmq.pause import PauseFlag
from jobq.transports.rabbitmq.refusals import not_declared
from jobq.transports.rabbitmq.tombstones import Tombstones
from jobq.transports.rabbitmq.topology import Topology


class RabbitAdmin:
    """Topology, dead letters and stats for one queue."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str,
                 max_pending: int = 0, logger: logging.Logger | None = None,
                 rabbitmq_api: str = "") -> None:
        frames.install()  # a dead message pamqp cannot decode must not close the connection
        self._link = link
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._queue = queue
        self._topology = Topology.configured(settings, queue, max_pending)
        self._flag = PauseFlag(link, self._topology)
        self._tombstones = Tombstones(link, self._topology)
        self._management = Management.configured(settings, rabbitmq_api)  # queues()

    async def init(self) -> str:
        """Declare the topology (idempotent); return a one-line summary of it."""
        t = self._topology
        async with self._channel(confirms=False) as channel:
            await t.declare(channel)
        tiers = ", ".join(t.tier_name(d) for d in t.tiers)
        return (f"RabbitMQ at {self._link.address}: exchange {t.exchange!r} -> {t.queue_type} queue "
                f"{t.queue!r} (dead letters {t.dlx!r} -> {t.dead!r}; retry tiers {tiers}; crash "
                f"copies {t.alone!r}; pause flag {t.paused!r}) declared")

    async def depth(self) -> Depth:
        """Messages by state: ready (the work and alone queues), in the retry tiers, dead.
        ``unacked`` is None: AMQP's passive declare reports only ready messages, and the
        broker-wide unacked count needs the management API; each consumer exports its own
        unacked deliveries as ``jobq_in_flight``."""
        t = self._topology
        counts = {t.alone: 0}
        async with self._channel(confirms=False) as channel:
            for name in t.queues():
                if name not in (t.alone, t.paused, t.cancelled):
                    queue = await channel.declare_queue(name, passive=True)
                    counts[name] = int(queue.declaration_result.message_count or 0)
        # Last, on a channel of its own: a topology of an older jobq has no <q>.alone until a
        # consumer or `jobq init` of this one runs (a passive declare of it closes its channel).
        try:
            async with self._channel(confirms=False) as channel:
                queue = await channel.declare_queue(t.alone, passive=True)
                counts[t.alone] = int(queue.declaration_result.message_count or 0)
        except (TransportError, ConfigError) as exc:  # ConfigError: _channel's not declared
            if not isinstance(exc.__cause__, aiormq.exceptions.ChannelNotFoundEntity):
                raise
        retry = sum(counts[t.tier_name(d)] for d in t.tiers)
        ready = counts[t.queue] + counts[t.alone]
        return Depth(depth={"ready": ready, "unacked": None, "dead": counts[t.dead], "retry": retry},
                     oldest_pending_seconds=None)

    async def queues(self) -> list[str]:
        """The broker's jobq queues on this exchange and vhost (the management API's list)."""
        return await self._management.jobq_queues(self._topology.exchange)

    async def pause(self) -> PauseState:
        """Put the pause message in ``<q>.paused`` (confirmed) unless one is there."""
        async with self._channel(confirms=True) as channel:
            return await self._flag.pause(channel)

    async def resume(self) -> PauseState:
        """Empty ``<q>.paused``, the message a reader holds for a moment included."""
        async with self._channel(confirms=False) as channel:
            return await self._flag.resume(channel)

    async def paused(self) -> bool:
        """Whether ``<q>.paused`` holds a message (a passive declare on a channel kept for it)."""
        return await self._flag.paused()

    async def pause_state(self) -> PauseState:
        """Whether the queue is paused, and since when (read from the message, put back)."""
        try:
            async with self._channel(confirms=False) as channel:
                flag: AbstractQueue = await channel.declare_queue(self._topology.paused,
                                                                  passive=True)
                return await self._flag.state(flag)
        except (TransportError, ConfigError) as exc:
            if isinstance(exc.__cause__, aiormq.exceptions.ChannelNotFoundEntity):
                return PauseState(paused=False)  # declared by an older jobq: never paused
            raise

    async def show_job(self, job_id: str) -> JobInfo:
        """A dead job by id (a read of ``<q>.dead``); NoSuchJob for any other: RabbitMQ cannot
        find a pending or running message without taking it (docs/architecture.md)."""
        dead = await self._dead_one(job_id)
        if dead is not None:
            return as_info(dead)
        cancelled = job_id in await self._tombstones.read()
        raise NoSuchJob(
            f"no dead job {job_id} in queue {self._queue!r}"
            + ("; it has a tombstone (jobq jobs cancel): it will not run, or was stopped"
               if cancelled else "")
            + ". RabbitMQ cannot look a pending or running message up by id without taking it "
            "from the queue, and keeps nothing of a finished one (`jobq jobs --help`)")

    async def list_jobs(self, state: str, kind: str | None = None, limit: int = 100
                        ) -> list[JobInfo]:
        """Dead jobs (``dead list``); ConfigError for another state, which RabbitMQ cannot list."""
        if state not in JOB_STATES:
            raise ConfigError(f"no job state {state!r}: one of {', '.join(JOB_STATES)}",
                              key="--state")
        if state != "dead":
            raise ConfigError(
                f"RabbitMQ cannot list {state} jobs: a queue's messages cannot be read without "
                "taking them from its consumers (and it keeps nothing of finished ones); "
                "`jobq stats` gives the counts, `--state dead` lists dead jobs", key="--state")
        rows = [as_info(row) for row in await self.dead_list(limit if kind is None else 10**9)]
        return [row for row in rows if kind is None or row.kind == kind][:limit]

    async def cancel_job(self, job_id: str) -> str:
        """Leave a tombstone for the job; refused for a dead one (purge it instead)."""
        if await self._dead_one(job_id) is not None:
            raise ConfigError(f"job {job_id} is dead already: nothing to cancel; "
                              "`jobq dead purge --id` deletes it", key="--id")
        if job_id in await self._tombstones.read():
            return f"job {job_id} has a tombstone already: nothing changed"
        async with self._channel(confirms=True) as channel:
            await self._tombstones.leave(channel, job_id)
        return (f"tombstone left for job {job_id} in {self._topology.cancelled}: if it is waiting "
                "it will not run (acked unrun when received); if it is running, its consumer "
                "stops it within about a second and it ends cancelled, never retried. RabbitMQ "
                "keeps nothing of finished jobs: if it had finished, nothing happens")

    async def retry_job(self, job_id: str) -> str:
        """A dead job back to the work queue with fresh attempts (``dead requeue``)."""
        if await self._dead_one(job_id) is None:
            raise NoSuchJob(
                f"no dead job {job_id} in queue {self._queue!r}: on RabbitMQ only a "
                "dead job can be retried now (a delayed one waits in a retry tier, which jobq "
                "does not read: `jobq jobs --help`)")
        await self.dead_requeue(ids=[job_id])
        return f"job {job_id} requeued: it was dead, it runs now with a fresh set of attempts"

    async def _dead_one(self, job_id: str) -> DeadJob | None:
        async with self._channel(confirms=False) as channel:
            for message in await self._walk(channel):
                if message.message_id == job_id:
                    return dead_row(message)
        return None

    async def dead_list(self, limit: int = 100) -> list[DeadJob]:
        """Dead jobs with their error, oldest first (they stay in the dead queue)."""
        async with self._channel(confirms=False) as channel:
            return [dead_row(m) for m in await self._walk(channel, limit)]

    async def dead_requeue(self, ids: Sequence[str] | None = None, kind: str | None = None
                           ) -> list[str]:
        """Publish dead jobs back to the work queue with attempts reset; unknown ids are refused."""
        t = self._topology
        async with self._channel(confirms=False) as getter, self._channel(confirms=True) as pub:
            chosen = self._choose(await self._walk(getter), ids, kind)
            raw = await pub.get_underlay_channel()
            for message in chosen:
                # The same encoder as every other copy jobq publishes (codec.republish): broker
                # headers (x-death, ...) and the dead-letter's own headers go, attempts restart.
                reset: dict[str, Any] = {ATTEMPT: 1}
                error = (message.headers or {}).get(ERROR)
                if error is not None:
                    reset["x-jobq-last-error"] = error
                body, props = republish(message.body, message.properties, reset, drop=DEAD_HEADERS)
                with translated(f"rabbitmq publish to {t.queue}"):
                    await raw.basic_publish(body, exchange=t.exchange, routing_key=t.queue,
                                            properties=props, mandatory=True)
                await message.ack()
        return [str(m.message_id) for m in chosen]

    async def dead_purge(self, ids: Sequence[str] | None = None, kind: str | None = None
                         ) -> list[str]:
        """Delete dead jobs; unknown ids are refused."""
        async with self._channel(confirms=False) as channel:
            chosen = self._choose(await self._walk(channel), ids, kind)
            for message in chosen:
                await message.ack()
        return [str(m.message_id) for m in chosen]

    async def prune(self, state: str, older_than: float) -> int:
        """Delete the dead letters that died more than ``older_than`` s ago; how many.

        One walk of ``<q>.dead`` as ``dead list`` walks it, as far as the letters there when it
        starts (later ones are younger): an old letter is acked (deleted) at once, any other
        stays unacked and goes back when the channel closes, in its place (a classic queue
        puts returned messages back where they were). A letter of unknown age is kept.
        """
        if state != "dead":
            raise ConfigError("RabbitMQ keeps no done jobs (an acked message is gone): only "
                              "dead letters can be pruned (--state dead)", key="--state")
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than)
        pruned = kept = undated = 0
        async with self._channel(confirms=False) as channel:
            queue = await channel.declare_queue(self._topology.dead, passive=True)
            async for message in self._each(queue, queue.declaration_result.message_count or 0):
                at = dead_at(message)
                if at is not None and at < cutoff:
                    await message.ack()
                    pruned += 1
                else:
                    kept += 1
                    if at is None:
                        undated += 1
        if kept:  # warned when some have no dead-at time: never pruned by age
            self._log.log(logging.WARNING if undated else logging.INFO, "kept %d dead letters of "
                          "queue %r%s", kept, self._queue, f" ({undated} without a dead-at time: "
                          "never pruned by age; `jobq dead purge --id`)" if undated else "")
        return pruned

    def _choose(self, messages: list[AbstractIncomingMessage], ids: Sequence[str] | None,
                kind: str | None) -> list[AbstractIncomingMessage]:
        wanted = {str(i) for i in ids} if ids else None
        if wanted is not None:
            missing = wanted - {str(m.message_id) for m in messages}
            if missing:
                raise NoSuchJob(f"no dead job {', '.join(sorted(missing))} in queue "
                                  f"{self._queue!r}; `jobq dead list` shows them")
        return [m for m in messages
                if (wanted is None or str(m.message_id) in wanted)
                and (kind is None or m.type == kind)]

    async def _walk(self, channel: AbstractChannel, limit: int | None = None
                    ) -> list[AbstractIncomingMessage]:
        """Take up to ``limit`` dead messages unacked (they return when the channel closes)."""
        queue = await channel.declare_queue(self._topology.dead, passive=True)
        return [message async for message in self._each(queue, limit)]

    @staticmethod
    async def _each(queue: AbstractQueue, limit: int | None
                    ) -> AsyncIterator[AbstractIncomingMessage]:
        """The queue's messages one by one, unacked, until it is empty or ``limit`` were taken."""
        taken = 0
        while limit is None or taken < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                return
            taken += 1
            yield message

    @contextlib.asynccontextmanager
    async def _channel(self, *, confirms: bool) -> AsyncIterator[AbstractChannel]:
        try:
            async with short_channel(self._link, confirms=confirms, what="rabbitmq admin") as ch:
                yield ch
        except TransportError as exc:
            if not_declared(exc.__cause__):  # `jobq init` never ran: exit 2, not 3
                raise ConfigError(f"{exc}; run `jobq init --transport=rabbitmq` to declare "
                                  f"queue {self._queue!r}", key="queue") from exc.__cause__
            raise

