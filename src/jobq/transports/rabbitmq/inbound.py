"""What a message that arrived is, decided from its body, properties and ``redelivered`` flag
alone: no I/O, no clock of its own (the caller passes one in), no broker.

``classify`` decodes the job (``codec.decode``) and says what becomes of it (``Arrival``):

- for the pool: the Delivery, with ``malformed`` set when the message is not a valid job, and
  ``fact`` set when a well-formed one must not run: ``CancelRequested`` (its id has a
  tombstone, see tombstones.py), ``Spent`` (an attempt header over max_attempts from a foreign
  producer; from ``<q>.alone``, a crash that used up its attempts). Taken from ``<q>.alone``, a
  well-formed one is ``isolate``: the pool runs it alone;
- ``due``: it arrived before its ``x-jobq-due`` (a delay or retry hopping through the tiers):
  never run early; the consumer sends it on to the next tier or holds it until then;
- ``copy``: a crash redelivery (or a marked copy an older jobq put back on the work queue):
  never run; the consumer copies it forward as ``copy`` says (see crashes.py).

The consumer does what the answer says (publishes, holds, counts, logs); the tests of this
module feed it bytes (tests/unit/test_rmq_inbound.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pamqp.commands import Basic

from jobq.config import LimitsConfig
from jobq.core.job import CancelRequested, Delivery, Job, Spent
from jobq.transports.rabbitmq.codec import (
    ATTEMPT,
    DUE,
    REDELIVERED,
    crashed,
    decode,
    due_at,
    isolated,
    suspected,
)
from jobq.transports.rabbitmq.crashes import CrashCopy, crash_copy
from jobq.transports.rabbitmq.session import Handle, gone


@dataclass(frozen=True, slots=True)
class Rules:
    """How one consumer reads its messages: its queue and the settings that decoding uses."""

    queue: str
    max_attempts: int  # a message without the header gets this many
    limits: LimitsConfig
    default_kind: str = ""  # rabbitmq.default_kind: plain messages are jobs of this kind
    # A classic queue's first crash redelivery runs again with the others, marked (crashes.py).
    strikes: bool = False


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a message is: a delivery for the pool, or (``due``, ``copy``) one that is not run."""

    delivery: Delivery
    due: float | None = None  # not due before this (epoch seconds): on to a tier, or held
    copy: CrashCopy | None = None  # a crash redelivery: this copy is published instead


def classify(body: bytes, props: Basic.Properties, *, redelivered: bool, handle: Any,
             rules: Rules, cancelled: Collection[str], clock: Callable[[], float],
             alone: bool = False) -> Arrival:
    """What the message (``body``, ``props``, ``redelivered``) is, received from the work queue
    or, with ``alone``, from ``<q>.alone``; ``cancelled``: the ids with a tombstone; ``handle``
    goes into the delivery as it is; ``clock()``: the time now in epoch seconds, asked only of a
    message with a due time."""
    job, problem = decode(body, props, queue=rules.queue, max_attempts=rules.max_attempts,
                          limits=rules.limits, default_kind=rules.default_kind)
    delivery = Delivery(job=job, handle=handle, malformed=problem,
                        lapsed=gone if isinstance(handle, Handle) else None)
    if problem is not None:
        return Arrival(delivery)
    table = props.headers
    if type(table) is dict and table.get(REDELIVERED):  # a crash copy, or a later copy of one
        delivery.job = job = dataclasses.replace(job, redelivered=True)
    if cancelled and job.id in cancelled:
        delivery.fact = CancelRequested()
        delivery.isolate = alone
        return Arrival(delivery)
    # The work queue's test first: this runs for every message, and most carry no due time.
    if alone or (type(table) is dict and table.get(DUE) is not None):
        due = due_at(props)
        if due is not None and due > clock():  # never run, so never crashed
            return Arrival(delivery, due=due)
    if alone:
        if crashed(props, redelivered):
            copy = crash_copy(job, isolated=True)  # it ran alone: charged
            if copy.dead is None:
                return Arrival(delivery, copy=copy)
            delivery.fact = Spent(copy.dead)
        else:
            delivery.fact = spent(job)
        delivery.isolate = True  # handed back, it goes back to <q>.alone
        return Arrival(delivery)
    # Not run: a crash redelivery (uncharged: it may never have started, see crashes.py), or a
    # marked copy an older jobq put back on the work queue. On a classic queue a first one runs
    # again with the others (marked), a second one alone.
    if crashed(props, redelivered) or isolated(props):
        first = rules.strikes and not isolated(props) and not suspected(props)
        return Arrival(delivery, copy=crash_copy(job, isolated=False, first=first))
    if job.attempt > job.max_attempts:  # spent(job), tested first: this runs for every message
        delivery.fact = spent(job)
    return Arrival(delivery)


def spent(job: Job) -> Spent | None:
    """The fact for an attempt header over max_attempts (a foreign producer); None if it is not."""
    if job.attempt > job.max_attempts:
        return Spent(f"attempt {job.attempt} is over max_attempts {job.max_attempts} "
                     f"(header {ATTEMPT})")
    return None
