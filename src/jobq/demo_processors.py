"""The demo processors: built-ins to try jobq with, and the compose demo stack's ``worker``.

Each name in BUILTINS can stand for ``module:function`` in ``consumer.processor`` (``-p crash``);
none of them is what a benchmark measures (the benchmark's own processors record every
completion and live in ``benchmarks/processors.py``).

The demo stack: ``--processor jobq.demo_processors:worker -a ms=20 -a jitter=20 -a fail_rate=0.03
-a dead_rate=0.003``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from collections.abc import Awaitable, Callable, Mapping

from jobq.core.errors import ConfigError, PermanentError, Retry
from jobq.core.job import Job

# What the factories return; a structural match for jobq.worker.processor.Processor (that module
# imports this one for BUILTINS, so the Protocol is not imported back).
AsyncHandler = Callable[[Job], Awaitable[None]]
ThreadHandler = Callable[[Job], None]


def noop() -> AsyncHandler:
    """Does nothing: measures the queue, not the work."""

    async def handle(job: Job) -> None:
        return None

    return handle


def sleep(ms: float = 10.0, jitter: float = 0.0) -> AsyncHandler:
    """Waits ``ms`` milliseconds (plus up to ``jitter`` ms at random): an I/O-bound job."""
    rand = random.Random()

    async def handle(job: Job) -> None:
        await asyncio.sleep((ms + jitter * rand.random()) / 1000.0)

    return handle


def cpu(rounds: int = 1000) -> ThreadHandler:
    """Hashes ``rounds`` times in a thread: a CPU-bound job."""

    def handle(job: Job) -> None:
        digest = job.id.encode()
        for _ in range(rounds):
            digest = hashlib.sha256(digest).digest()

    return handle


def flaky(rate: float = 0.1, delay: float | None = None) -> AsyncHandler:
    """Fails a fraction ``rate`` of attempts with a retryable error."""
    rand = random.Random()

    async def handle(job: Job) -> None:
        if rand.random() < rate:
            raise Retry(delay=delay, reason=f"flaky: attempt {job.attempt} failed on purpose")

    return handle


def fail(message: str = "this job always fails") -> AsyncHandler:
    """Always fails permanently: the job is dead-lettered at once."""

    async def handle(job: Job) -> None:
        raise PermanentError(message)

    return handle


def crash(exit_code: int = 137) -> ThreadHandler:
    """Kills its own process at once (no cleanup), like a segfault or the OOM killer."""

    def handle(job: Job) -> None:
        os._exit(exit_code)

    return handle


BUILTINS: Mapping[str, Callable[..., AsyncHandler | ThreadHandler]] = {
    "noop": noop,
    "sleep": sleep,
    "cpu": cpu,
    "flaky": flaky,
    "fail": fail,
    "crash": crash,
}


class DemoFailure(Exception):
    """A transient failure the demo injects on purpose (retried with backoff)."""


def worker(ms: float = 20.0, jitter: float = 20.0, fail_rate: float = 0.03,
           dead_rate: float = 0.003) -> AsyncHandler:
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
