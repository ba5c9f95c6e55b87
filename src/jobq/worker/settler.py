"""The one place that decides a job's fate, and has the transport carry the decision out.

An outcome (None, or the error a handler failed with) or a fact the transport found about
an unrun delivery becomes a ``job.Decision`` here and nowhere else; ``Settler`` then asks
``transport.settle`` to carry it out, counts it in ``PoolStats``, tells the observer, logs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from jobq.core.attempts import AttemptError
from jobq.core.errors import (
    InvalidArguments,
    JobCancelled,
    JobTimeout,
    MalformedJob,
    SettleRejected,
    TransportError,
    UnknownKind,
    describe,
)
from jobq.core.job import (
    ACK,
    Cancelled,
    CancelRequested,
    Dead,
    Decision,
    Delivery,
    Fact,
    Job,
    Outcome,
    RetryIn,
    Spent,
)
from jobq.core.port import Transport
from jobq.worker.bounds import RELEASE_TIMEOUT, STALL_MARGIN
from jobq.worker.capacity import Capacity
from jobq.worker.handback import release_all
from jobq.worker.retry import RetryPolicy
from jobq.worker.stats import PoolObserver, PoolStats

# Errors whose reason says it all: a traceback would show jobq's insides, not the handler's.
_NO_TRACE = (MalformedJob, InvalidArguments, UnknownKind, JobCancelled, JobTimeout)


def decide_fact(fact: Fact) -> Dead | Cancelled:
    """What a fact the transport found about an unrun job means."""
    match fact:
        case Spent(reason=reason):
            return Dead(reason)
        case CancelRequested():
            return Cancelled("cancelled by an operator (jobq jobs cancel) before it ran")


def decide(policy: RetryPolicy, error: BaseException, job: Job) -> RetryIn | Dead | Cancelled:
    """An operator's cancel, else the policy's decision; if deciding fails, retry with
    backoff (or dead when the attempts are spent)."""
    if isinstance(error, JobCancelled):
        return Cancelled(str(error))
    try:
        return policy.decide(error, job)
    except Exception as exc:
        failed = f"{describe(error)} (the retry decision failed: {describe(exc)};"
        if job.last_attempt:
            return Dead(f"{failed} gave up after {job.attempt} of {job.max_attempts} attempts)")
        try:
            delay = policy.backoff(job.attempt)
        except Exception:
            delay = STALL_MARGIN
        return RetryIn(delay, f"{failed} retried with backoff)")


def failed(policy: RetryPolicy, error: BaseException, job: Job) -> RetryIn | Dead | Cancelled:
    """``decide``, with the record of ``error`` for the job's history on a retry or dead."""
    decision = decide(policy, error, job)
    if isinstance(decision, Cancelled):
        return decision
    try:
        record = AttemptError.of(error, job.attempt, trace=not isinstance(error, _NO_TRACE))
    except Exception:  # an error whose traceback cannot be formatted: the decision stands
        return decision
    return dataclasses.replace(decision, error=record)


class Settler:
    """Decides each delivery's fate and settles it once; frees its slot whatever happens.

    ``holding`` is the workers' (slot -> the delivery it took and has not settled): a settle
    empties the slot, so that a worker that dies afterwards leaves no orphan behind.
    """

    def __init__(self, transport: Transport, policy: RetryPolicy, *, capacity: Capacity,
                 holding: list[Delivery | None], stats: PoolStats,
                 observer: PoolObserver | None, logger: logging.Logger,
                 shutdown_timeout: float) -> None:
        self._transport = transport
        self._policy = policy
        self._capacity = capacity
        self._holding = holding
        self._stats = stats
        self._observer = observer
        self._log = logger
        self._debug = logger.isEnabledFor(logging.DEBUG)
        self._release_limit = min(RELEASE_TIMEOUT, shutdown_timeout)

    async def settle(self, delivery: Delivery, error: BaseException | None, duration: float,
                     slot: int = -1) -> None:
        """The one place that decides a job's fate, as a value the transport carries out."""
        job = delivery.job
        if delivery.malformed is not None:
            error = MalformedJob(delivery.malformed)
        decision: Decision = (decide_fact(delivery.fact) if delivery.fact is not None
                              else ACK if error is None else failed(self._policy, error, job))
        carried = False
        try:
            try:
                await self._transport.settle(delivery, decision)
            except SettleRejected as rejected:  # it failed after all: decided as a failure
                error = rejected.cause
                decision = failed(self._policy, error, job)
                await self._transport.settle(delivery, decision)
            carried = True
        except TransportError as exc:
            # At-least-once: the job was not settled, so the backend hands it out again.
            self._stats.settle_failures += 1
            self._log.error("could not settle job %s as %s (%s); it will be delivered again",
                            job.id, decision.outcome.value, describe(exc))
        except Exception as exc:  # a bug below us: logged in full, and the worker lives on
            self._stats.settle_failures += 1
            self._log.error("settling job %s as %s failed unexpectedly (%s); it will be "
                            "delivered again", job.id, decision.outcome.value, describe(exc),
                            exc_info=exc)
        finally:
            if slot >= 0:
                self._holding[slot] = None
            self._capacity.freed(delivery)
        self._settled_as(decision, duration, error, job, carried)

    def _settled_as(self, decision: Decision, duration: float, error: BaseException | None,
                    job: Job, carried: bool) -> None:
        """Count and log a decision the transport was asked to carry out; the observer hears
        only of one carried out (a job whose settle failed comes again: its next settle is)."""
        outcome = decision.outcome
        if carried:  # a settle that failed is a settle_failure only: the job comes again
            self._count(outcome)
            if self._observer is not None:
                self._observer.settled(decision, duration, error, job)
        if outcome is not Outcome.ACK:
            # The delay until the next attempt for a retry; the traceback of what the handler
            # raised, once (a fact, a malformed job or bad arguments have none worth showing).
            when = f" in {decision.delay:.3g}s" if isinstance(decision, RetryIn) else ""
            trace = error if error is not None and not isinstance(error, _NO_TRACE) else None
            self._log.log(logging.ERROR if outcome is Outcome.DEAD else logging.WARNING,
                          "job %s (%s) attempt %d/%d %s%s after %.3fs: %s", job.id, job.kind[:100],
                          job.attempt, job.max_attempts, outcome.value, when, duration,
                          decision.reason, exc_info=trace,
                          extra={"job_id": job.id, "kind": job.kind, "attempt": job.attempt,
                                 "outcome": outcome.value, "duration": duration})
        elif self._debug:
            self._log.debug("job %s attempt %d ok in %.3fs", job.id, job.attempt, duration,
                            extra={"job_id": job.id, "attempt": job.attempt, "outcome": "ok",
                                   "duration": duration})

    def _count(self, outcome: Outcome) -> None:
        stats = self._stats
        if outcome is Outcome.ACK:
            stats.ok += 1
        elif outcome is Outcome.RETRY:
            stats.retried += 1
        elif outcome is Outcome.CANCELLED:
            stats.cancelled += 1
        else:
            stats.dead += 1
        stats.last_job_at = time.monotonic()

    async def lapsed(self, delivery: Delivery) -> None:
        """Hand back, unstarted, a delivery the transport no longer holds (``Delivery.lapsed``):
        released where it is still ours after all, nothing where it is gone."""
        self._log.warning("job %s not started: its lease or channel was lost while it waited "
                          "(the event loop blocked, or the server was unreachable); it runs "
                          "where it is taken next", delivery.job.id)
        try:
            released = await release_all(self._transport, [delivery], log=self._log,
                                         limit=self._release_limit)
            self._stats.released += released
        finally:
            self._capacity.freed(delivery)

    async def release(self, unstarted: list[Delivery], why: str) -> None:
        """Hand back what was received but never started; its attempt does not count."""
        # One with a fact is settled as it decides, never handed back: its decision needs no
        # worker, and a copy handed back could lose what the transport saw (a crash's mark).
        settle = [d for d in unstarted if d.fact is not None]
        if settle:
            unstarted = [d for d in unstarted if d.fact is None]
            await asyncio.gather(*(self.settle(d, None, 0.0) for d in settle))
        if not unstarted:
            return
        released = await release_all(self._transport, unstarted, log=self._log,
                                     limit=self._release_limit)
        self._capacity.outstanding -= len(unstarted)
        self._stats.released += released
        if released:
            self._log.info("released %d unstarted jobs (%s)", released, why)
