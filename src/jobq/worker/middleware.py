"""Per-job middleware: code around each run of a handler, and after each decision.

```python
class Timing(jobq.Middleware):
    async def around(self, job: jobq.Job, call_next: jobq.CallNext) -> None:
        started = time.monotonic()
        try:
            await call_next(job)          # the next middleware, then the handler
        finally:
            log.info("%s took %.3fs", job.kind, time.monotonic() - started)

    def settled(self, decision, duration, error, job) -> None:
        ...                               # the worker's decision, carried out
```

``around`` runs in the job's own task, so a context variable it sets is the handler's (the
tracing's span is current there that way); what it raises fails the job as the handler's
error would, and a job timeout or an operator's cancel interrupts it as it does the handler.
``settled`` hears of each decision once the transport carried it out (a settle that failed
is heard of when the job comes again), in the order the middleware were given; it must be
quick, it runs on the hot path, and what it raises is logged and changes nothing.

jobq's own tracing, metrics and an app's failure hooks are middleware of this kind: the
consumer's chain is the tracing (outermost), then an app's middleware in the order added,
then the handler; ``settled`` goes to the failure hooks, the app's middleware, the tracing,
the metrics. A middleware that keeps the default ``around`` is left out of the run's chain
and costs a job nothing there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from jobq.core.job import Decision, Job
from jobq.worker.processor import Handler
from jobq.worker.stats import PoolObserver

CallNext = Callable[[Job], Awaitable[None]]
log = logging.getLogger("jobq.middleware")


class Middleware:
    """Per-job middleware (this module's docstring): override ``around``, ``settled`` or both."""

    async def around(self, job: Job, call_next: CallNext) -> None:
        """Run the job: ``await call_next(job)``, with what this middleware does around it."""
        await call_next(job)

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """The worker's ``decision`` for ``job`` was carried out; ``duration``: its run, in
        seconds; ``error``: what the run raised, if it did."""


def runs_around(middleware: Middleware) -> bool:
    """Whether ``middleware`` does something around a run (overrides ``around``)."""
    return type(middleware).around is not Middleware.around


def wrapped(middlewares: Sequence[Middleware], handler: Handler) -> Handler:
    """``handler`` inside the ``around`` of each middleware, the first outermost; built once."""
    run = handler
    for middleware in reversed([m for m in middlewares if runs_around(m)]):
        run = _link(middleware, run)
    return run


def _link(middleware: Middleware, call_next: Handler) -> Handler:
    around = middleware.around

    def run(job: Job) -> Awaitable[None]:
        return around(job, call_next)

    return run


class Settled:
    """The pool's observer: each middleware's ``settled`` in order, then ``gauges`` to the
    metrics (``last``)."""

    def __init__(self, middlewares: Sequence[Middleware], last: PoolObserver) -> None:
        self._middlewares = tuple(middlewares)
        self._last = last

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """Tell each middleware, then the last; one that raises is logged, the rest still hear."""
        for middleware in self._middlewares:
            try:
                middleware.settled(decision, duration, error, job)
            except Exception:
                log.exception("middleware %s failed on job %s's %s", type(middleware).__name__,
                              job.id, decision.outcome.value)
        self._last.settled(decision, duration, error, job)

    def gauges(self, in_flight: int, buffered: int) -> None:
        """The last observer's (the metrics)."""
        self._last.gauges(in_flight, buffered)


def observer_of(middlewares: Sequence[Middleware], last: PoolObserver) -> PoolObserver:
    """The pool's observer for ``middlewares`` ahead of ``last``: ``last`` alone (no call more
    per job) when there are none."""
    return Settled(middlewares, last) if middlewares else last
