"""The broker's consumer_timeout against the consumer's own settings, checked at start.

RabbitMQ closes a channel with PRECONDITION_FAILED when one of its deliveries stays unacked
longer than ``consumer_timeout`` (30 minutes by default; 4.3 cancels the consumer instead, on
quorum queues), and every in-flight delivery of the session comes back. A delivery is unacked
from the moment it arrives: it may wait in the buffer behind others, then run. The broker's
value is not visible over AMQP (3.10 has no per-queue or per-consumer timeout either; see
docs/rabbitmq-versions.md), so ``rabbitmq.consumer_timeout`` says what it is.
"""

from __future__ import annotations

import math


def worst_hold(*, job_timeout: float, prefetch: int, concurrency: int) -> float:
    """Longest a delivery can stay unacked: behind a full prefetch of jobs that each run to the
    job timeout on ``concurrency`` workers, then its own run."""
    return math.ceil(prefetch / max(1, concurrency)) * job_timeout


def consumer_timeout_warning(*, consumer_timeout: float, job_timeout: float | None,
                             prefetch: int, concurrency: int) -> str | None:
    """What to change when a delivery could outlive the broker's consumer_timeout, or None.

    A warning, not a refusal: job_timeout is a bound, not a duration. A configuration whose
    worst case passes the broker's timeout works as long as jobs are faster than their bound,
    which they usually are; it never certainly fails, so refusing to start would stop working
    consumers. The line names the keys that close the gap.
    """
    if consumer_timeout <= 0:
        return None  # the broker enforces none
    keys = ("shorten consumer.job_timeout, or hold fewer deliveries (consumer.buffer, or "
            "rabbitmq.prefetch), or raise the broker's consumer_timeout (rabbitmq.conf; then "
            "set rabbitmq.consumer_timeout to it)")
    if job_timeout is None:
        return (f"jobs have no time limit, so one can outlive the broker's consumer_timeout "
                f"({consumer_timeout:g}s, rabbitmq.consumer_timeout): set consumer.job_timeout, "
                f"or raise the broker's consumer_timeout")
    hold = worst_hold(job_timeout=job_timeout, prefetch=prefetch, concurrency=concurrency)
    if hold < consumer_timeout:
        return None
    rounds = math.ceil(prefetch / max(1, concurrency))
    return (f"a delivery can stay unacked up to {hold:g}s ({rounds} x consumer.job_timeout "
            f"{job_timeout:g}s: prefetch {prefetch} on concurrency {concurrency}), at or over the "
            f"broker's consumer_timeout ({consumer_timeout:g}s, rabbitmq.consumer_timeout), which "
            f"then closes the channel and every in-flight delivery comes back: {keys}")
