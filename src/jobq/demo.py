"""The processor of the demo stack: I/O-like work with a few failures, so every panel moves.

``--processor jobq.demo:worker -a ms=20 -a jitter=20 -a fail_rate=0.03 -a dead_rate=0.003``
"""

from __future__ import annotations

import asyncio
import random

from jobq.errors import ConfigError, PermanentError
from jobq.job import Job
from jobq.processor import Processor


class DemoFailure(Exception):
    """A transient failure the demo injects on purpose (retried with backoff)."""


def worker(ms: float = 20.0, jitter: float = 20.0, fail_rate: float = 0.03,
           dead_rate: float = 0.003) -> Processor:
    """Sleep ``ms`` (+ up to ``jitter``) ms; fail a ``fail_rate`` of attempts (retryable) and a
    ``dead_rate`` of them for good (dead-lettered at once)."""
    if not 0 <= fail_rate + dead_rate <= 1:
        raise ConfigError("fail_rate + dead_rate must be between 0 and 1",
                          key="consumer.processor_args")
    rand = random.Random()

    async def handle(job: Job) -> None:
        await asyncio.sleep((ms + jitter * rand.random()) / 1000.0)
        roll = rand.random()
        if roll < dead_rate:
            raise PermanentError(f"demo: job {job.id} can never succeed")
        if roll < dead_rate + fail_rate:
            raise DemoFailure(f"demo: attempt {job.attempt} of job {job.id} failed")

    return handle
