"""Enqueue jobs into RabbitMQ: persistent messages, publisher confirms, pipelined, returns raised.

Confirms are pipelined: a window of publishes in flight, confirmed as the broker goes.
``mandatory`` is set, so a message no queue would take comes back as an error.

Every job is checked against the limits before anything is published. With
``limits.max_pending`` the work queue refuses publishes once full (x-max-length,
reject-publish): the refused messages are published again, with backoff, until they are
confirmed or the timeout passes; then QueueFull, carrying the ids that were accepted.

A cut connection is ridden out within the same timeout (see ``enqueue_many``); every publish
waits at most ``rabbitmq.publish_timeout`` for its confirm, and nothing is sent while the
broker blocks publishing (connection.blocked: a memory or disk alarm).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiormq
from aio_pika.abc import AbstractChannel
from aiormq.abc import AbstractChannel as RawChannel

from jobq.config import LimitsConfig, RabbitConfig
from jobq.core.backoff import QUEUE_FULL_BACKOFF, Backoff
from jobq.core.errors import (
    ConfigError,
    ConnectionLost,
    JobqError,
    MalformedJob,
    OutcomeUnknown,
    QueueFull,
    TransportError,
    describe,
)
from jobq.core.port import NewJob
from jobq.core.within import Deadline
from jobq.transports.rabbitmq.codec import Outgoing, due_at, encode_job, new_job_id
from jobq.transports.rabbitmq.connect import (
    LINK_ERRORS,
    RabbitLink,
    describe_amqp,
    nacked,
    translated,
)
from jobq.transports.rabbitmq.topology import Topology

WINDOW = 2000  # publishes awaiting their confirm at once


CLOSE_TIMEOUT = 2.0  # seconds a discarded channel's close may take


class RabbitPublisher:
    """Publisher for the RabbitMQ backend; declares each queue's topology on first use."""

    def __init__(self, link: RabbitLink, settings: RabbitConfig, *, queue: str,
                 max_attempts: int, logger: logging.Logger | None = None,
                 limits: LimitsConfig | None = None) -> None:
        self._link = link
        self._limits = limits or LimitsConfig()
        self._cfg = settings
        self._queue = queue
        self._max_attempts = max_attempts
        self._log = logger or logging.getLogger("jobq.rabbitmq")
        self._channel: AbstractChannel | None = None
        self._raw: RawChannel | None = None  # the aiormq channel under it: publishes go there
        self._declared: set[str] = set()

    def topology(self, queue: str) -> Topology:
        """The topology ``queue`` is published into."""
        return Topology.configured(self._cfg, queue, self._limits.max_pending)

    async def open(self) -> None:
        """Declare the default queue's topology and open the confirming channel."""
        await self._ready(self._queue)

    async def close(self) -> None:
        """Close the channel (every enqueue was confirmed before it returned)."""
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with translated("rabbitmq close"):
                await channel.close()

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """Publish one job and wait for its confirm; return its id."""
        (job_id,) = await self.enqueue_many([job], queue=queue, timeout=timeout,
                                            connection=connection)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """Publish jobs with up to WINDOW confirms outstanding; return their ids in order.

        Within ``limits.enqueue_timeout``: a publish that surely never reached the broker (no
        connection, a closed channel) is sent again on a fresh channel with backoff, and one
        a full queue refused is sent again too. A publish sent whose confirm was lost is not
        (the broker may have it): the call ends in ``OutcomeUnknown`` naming those ids.
        ``connection`` is refused: a broker publish cannot join a database transaction.
        """
        if connection is not None:
            raise ConfigError("a transactional enqueue (connection=...) needs the PostgreSQL "
                              "backend: a RabbitMQ publish cannot join a database transaction; "
                              "publish after your COMMIT, or keep this queue on PostgreSQL",
                              key="transport")
        if any(job.key is not None for job in jobs):
            raise ConfigError("unique keys (NewJob.key) need the PostgreSQL backend: a RabbitMQ "
                              "queue cannot tell whether a job with that key is still waiting; "
                              "nothing was enqueued", key="transport")
        return await self.publish_as([new_job_id() for _ in jobs], jobs, queue=queue,
                                     timeout=timeout)

    async def publish_valid(self, ids: Sequence[str], jobs: Sequence[NewJob]) -> dict[str, str]:
        """``publish_as`` for the jobs that pass the checks of every enqueue; the others' ids,
        each with why it was refused (``jobq relay`` dead-letters those on PostgreSQL)."""
        refused: dict[str, str] = {}
        await self.publish_as(ids, jobs, refused=refused)
        return refused

    async def publish_as(self, ids: Sequence[str], jobs: Sequence[NewJob], *,
                         queue: str | None = None, timeout: float | None = None,
                         refused: dict[str, str] | None = None) -> list[str]:
        """``enqueue_many`` with the ids given (``jobq relay``: each job keeps its PostgreSQL
        id, so a job relayed twice arrives twice under the same message_id). With ``refused``,
        a job the checks refuse (MalformedJob, JobTooLarge) is left out and noted there with
        the reason instead of failing the call."""
        queue = queue or self._queue
        if not self._cfg.max_priority and any(job.priority for job in jobs):
            raise ConfigError("a job with a priority (NewJob.priority) needs a queue with "
                              "priorities: set rabbitmq.max_priority (1-9) with a classic work "
                              "queue, and declare it anew (an existing queue keeps its "
                              "arguments); nothing was enqueued", key="rabbitmq.max_priority")
        messages, kept = [], []
        for job_id, job in zip(ids, jobs, strict=True):
            try:
                messages.append(encode_job(job, job_id=job_id, max_attempts=self._max_attempts,
                                           limits=self._limits))
                kept.append(job)
            except MalformedJob as exc:
                if refused is None:
                    raise
                refused[job_id] = describe(exc)
        if not messages:
            return []
        jobs = kept
        ids = [str(props.message_id) for _, props in messages]
        wait = self._limits.enqueue_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        waiting, maybe = list(range(len(jobs))), []
        tries = _Tries(self._link.connect_config.backoff())
        last = _Round()
        while waiting:
            last = await self._round(queue, jobs, messages, waiting, deadline)
            maybe += last.maybe
            waiting = sorted(last.refused + last.unsent)
            left = deadline - loop.time()
            if not waiting or left <= 0:
                break
            await asyncio.sleep(min(left, tries.delay(bool(last.unsent))))
        if not waiting and not maybe:
            return ids
        raise self._unfinished(queue, ids, waiting, maybe, last, wait)

    def _unfinished(self, queue: str, ids: list[str], waiting: list[int], maybe: list[int],
                    last: _Round, wait: float) -> JobqError:
        """The error for a call that ran out of time, or whose outcome is partly unknown."""
        accepted = tuple(ids[i] for i in range(len(ids)) if i not in set(waiting) | set(maybe))
        if maybe:
            unsent = (f"; {len(waiting)} more were not enqueued" if waiting else "")
            return OutcomeUnknown(
                f"rabbitmq publish to {queue!r}: {len(maybe)} jobs may or may not be enqueued "
                f"(sent, but the confirm was lost: {last.cause or 'connection lost'}){unsent}; "
                f"enqueueing them again may run them twice", accepted=accepted,
                maybe=tuple(ids[i] for i in maybe))
        if last.unsent:
            return ConnectionLost(f"rabbitmq publish to {queue!r}: {len(waiting)} jobs not "
                                  f"enqueued within {wait:g}s (limits.enqueue_timeout): "
                                  f"{last.cause}", accepted=accepted)
        return QueueFull(
            f"queue {queue!r} is full: {self._limits.max_pending} jobs ready "
            f"(limits.max_pending), no room for {len(waiting)} more within {wait:g}s",
            accepted=accepted)

    async def _round(self, queue: str, jobs: Sequence[NewJob], messages: Sequence[Outgoing],
                     which: list[int], deadline: float) -> _Round:
        """One try at ``which``: nothing is sent while the broker blocks publishing."""
        if self._link.blocked:
            left = deadline - asyncio.get_running_loop().time()
            with contextlib.suppress(TimeoutError):
                async with Deadline(max(0.0, left)):
                    await self._link.unblocked.wait()
        if self._link.blocked:
            return _Round(unsent=which, cause=f"RabbitMQ at {self._link.address} blocks "
                          "publishing (a resource alarm: memory or disk)")
        try:
            async with Deadline(self._cfg.publish_timeout):
                raw = await self._ready(queue)
        except ConnectionLost as exc:
            self._channel = None  # reopened on the next try
            return _Round(unsent=which, cause=describe(exc))
        except TimeoutError:
            self._channel = None
            return _Round(unsent=which, cause=f"no answer from RabbitMQ within "
                          f"{self._cfg.publish_timeout:g}s (rabbitmq.publish_timeout)")
        return await self._publish(raw, queue, jobs, messages, which)

    async def _publish(self, raw: RawChannel, queue: str, jobs: Sequence[NewJob],
                       messages: Sequence[Outgoing], which: list[int]) -> _Round:
        """Publish ``messages[i] for i in which``; sort out what was confirmed and what not.

        On the aiormq channel under aio-pika's (as the consumer does): the aio-pika layer costs
        a Message object per job and adds nothing a publish with confirms needs. A single job
        (``producer --rate`` sends each job when it is due) skips the gather's task.
        """
        topology = self.topology(queue)
        done = _Round()
        timeout = self._cfg.publish_timeout
        for start in range(0, len(which), WINDOW):
            sends = []
            for i in which[start:start + WINDOW]:
                body, props = messages[i]
                due = due_at(props)
                tier = topology.hop(due - time.time()) if due is not None else None
                exchange, key = ("", tier) if tier else (self._cfg.exchange, queue)
                sends.append(raw.basic_publish(body, exchange=exchange, routing_key=key,
                                               properties=props, mandatory=True, timeout=timeout))
            results = await _gathered(sends)
            for i, result in zip(which[start:start + WINDOW], results, strict=True):
                if isinstance(result, BaseException):
                    self._sort(done, i, result, queue)
        if done.unsent or done.maybe:
            await self._drop_channel()  # a fresh channel (and connection) for the next try
        return done

    async def _drop_channel(self) -> None:
        """Let go of the publishing channel, closing it if it is still open (a channel that
        nacked is healthy to the client: left open it would stay on the connection)."""
        channel, self._channel, self._raw = self._channel, None, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                async with Deadline(CLOSE_TIMEOUT):
                    await channel.close()

    def _sort(self, done: _Round, i: int, exc: BaseException, queue: str) -> None:
        """File a failed publish: refused, never sent, maybe sent; or raise what is final."""
        if nacked(exc) and self._limits.max_pending:
            done.refused.append(i)  # a negative confirm: the queue is at x-max-length
        elif nacked(exc):
            # A negative confirm: the queue could not take it (a quorum queue between leaders
            # after a cluster node died). Sent again on a fresh channel: a channel that saw the
            # leader die may go on refusing (seen in the cluster harness, faults/cluster).
            done.unsent.append(i)
            done.cause = "negative confirm (the queue could not take it: no leader yet?)"
        elif isinstance(exc, aiormq.exceptions.ChannelInvalidStateError):
            done.unsent.append(i)  # rejected before a frame was written: surely not enqueued
            done.cause = describe_amqp(exc)
        elif isinstance(exc, (TimeoutError, asyncio.CancelledError, *LINK_ERRORS)):
            done.maybe.append(i)
            done.cause = (f"no confirm within {self._cfg.publish_timeout:g}s "
                          f"(rabbitmq.publish_timeout)" if isinstance(exc, TimeoutError)
                          else describe_amqp(exc))
            if self._link.blocked:
                done.cause += ", the broker blocks publishing (a resource alarm)"
        else:
            raise self._explain(exc, queue) from exc

    async def _ready(self, queue: str) -> RawChannel:
        """The channel to publish on, connecting and declaring ``queue`` first if needed.

        One connection attempt per call: the caller retries within its own deadline.
        """
        if self._channel is None or self._channel.is_closed or self._raw is None:
            if not self._link.is_open:
                await self._link.close()
                await self._link.open(attempts=1)
            self._channel = await self._link.channel(confirms=True)
            with translated("rabbitmq open channel"):
                self._raw = await self._channel.get_underlay_channel()
        if queue not in self._declared:
            declaring = await self._link.channel(confirms=False)
            with translated("rabbitmq declare"):
                # A classic queue on a cluster node that is down (the pause flag, say) is left
                # out: publishing needs the exchange and the work queue only.
                await self.topology(queue).declare_consuming(
                    declaring, lambda: self._link.channel(confirms=False))
                await declaring.close()
            self._declared.add(queue)
        return self._raw

    def _explain(self, exc: BaseException, queue: str) -> TransportError:
        if isinstance(exc, aiormq.exceptions.PublishError):
            return TransportError(f"RabbitMQ returned a message for queue {queue!r}: no queue is "
                                  f"bound for it (run `jobq init --transport=rabbitmq`)")
        if isinstance(exc, aiormq.exceptions.AMQPError | ConnectionError | OSError | RuntimeError):
            return ConnectionLost(f"rabbitmq publish: {describe_amqp(exc)}")
        if isinstance(exc, TransportError):
            return exc
        raise exc


@dataclass
class _Round:
    """How one try went: indices refused (queue full), never sent, or sent without a confirm."""

    refused: list[int] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)
    maybe: list[int] = field(default_factory=list)
    cause: str = ""


class _Tries:
    """Backoff between tries: the connect backoff after a lost link, a brisk one for a full queue."""

    def __init__(self, lost: Backoff) -> None:
        self._lost = lost
        self._lost_tries = 0
        self._full_tries = 0

    def delay(self, lost: bool) -> float:
        if lost:
            self._lost_tries += 1
            return self._lost.delay(self._lost_tries)
        self._full_tries += 1
        return QUEUE_FULL_BACKOFF.delay(self._full_tries)


async def _gathered(sends: Sequence[Coroutine[Any, Any, object]]) -> list[object]:
    """Each send's result or exception (a confirm cancelled by a closing channel included)."""
    if len(sends) != 1:
        return await asyncio.gather(*sends, return_exceptions=True)
    try:
        return [await sends[0]]
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we are being cancelled, not the confirm
        return [exc]
    except Exception as exc:
        return [exc]
