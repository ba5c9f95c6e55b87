"""OpenTelemetry traces for jobq (``tracing.enabled``, the ``otel`` extra): a job's run is tied
to the enqueue that made it.

The producer side (``TracedPublisher``) opens a PRODUCER span per enqueue call and writes its
context into every job's headers as W3C ``traceparent`` (and ``tracestate``), which both
backends carry with the job (a PostgreSQL row's ``headers``, a RabbitMQ message's headers).
The consumer side (``JobTracing``, middleware: worker/middleware.py): a CONSUMER span per run, child of the
producer's span when the job carries one, current while the handler runs (the handler's own
spans nest in it), with the job's kind, id, attempt and, once the pool settled it, its outcome.
The application sets up the SDK and its exporter; jobq uses the API only. With tracing off
nothing here is imported or wrapped, so it costs nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from jobq.core.job import Decision, Job
from jobq.core.port import NewJob, Publisher
from jobq.worker.middleware import CallNext, Middleware

TRACER = "jobq"


class TracedPublisher:
    """A Publisher whose enqueues open a span and carry its context in the jobs' headers."""

    def __init__(self, publisher: Publisher, *, system: str, queue: str) -> None:
        self._publisher = publisher
        self._system = system
        self._queue = queue
        self._tracer = trace.get_tracer(TRACER)

    async def open(self) -> None:
        """Open the wrapped publisher."""
        await self._publisher.open()

    async def close(self) -> None:
        """Close the wrapped publisher."""
        await self._publisher.close()

    async def enqueue(self, job: NewJob, *, queue: str | None = None,
                      timeout: float | None = None, connection: object | None = None) -> str:
        """``enqueue`` inside a PRODUCER span, its context in the job's headers."""
        (job_id,) = await self.enqueue_many([job], queue=queue, timeout=timeout,
                                            connection=connection)
        return job_id

    async def enqueue_many(self, jobs: Sequence[NewJob], *, queue: str | None = None,
                           timeout: float | None = None,
                           connection: object | None = None) -> list[str]:
        """``enqueue_many`` inside one PRODUCER span, its context in every job's headers."""
        name = queue or self._queue
        kinds = sorted({job.kind for job in jobs})
        with self._tracer.start_as_current_span(
                f"{name} publish", kind=SpanKind.PRODUCER,
                attributes={"messaging.system": self._system, "messaging.destination.name": name,
                            "messaging.batch.message_count": len(jobs),
                            "jobq.kind": kinds[0] if len(kinds) == 1 else ",".join(kinds)}
                ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            carried = [dataclasses.replace(job, headers={**job.headers, **carrier})
                       for job in jobs]
            ids = await self._publisher.enqueue_many(carried, queue=queue, timeout=timeout,
                                                     connection=connection)
            if len(ids) == 1:
                span.set_attribute("messaging.message.id", ids[0])
            return ids


class JobTracing(Middleware):
    """The consumer side, as middleware: ``around`` runs the handler inside the job's span,
    ``settled`` ends the span with its outcome once the pool settled it."""

    def __init__(self, *, system: str, queue: str) -> None:
        self._system = system
        self._queue = queue
        self._tracer = trace.get_tracer(TRACER)
        self._open: dict[int, trace.Span] = {}  # id(job) -> its span, until settled

    async def around(self, job: Job, call_next: CallNext) -> None:
        """The run inside a CONSUMER span, child of the enqueue's span if it has one."""
        parent = propagate.extract(job.headers)
        span = self._tracer.start_span(
            f"{job.queue} process", context=parent, kind=SpanKind.CONSUMER,
            attributes={"messaging.system": self._system,
                        "messaging.destination.name": job.queue,
                        "messaging.message.id": job.id, "jobq.kind": job.kind,
                        "jobq.attempt": job.attempt, "jobq.max_attempts": job.max_attempts})
        self._open[id(job)] = span
        token = context.attach(trace.set_span_in_context(span))
        try:
            await call_next(job)
        except BaseException as exc:
            span.record_exception(exc)
            raise
        finally:
            context.detach(token)

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """End the job's span (if it ran) with the outcome."""
        span = self._open.pop(id(job), None)
        if span is not None:
            span.set_attribute("jobq.outcome", decision.outcome.value)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()
