"""Failed attempts reported to Sentry (``pip install 'jobq[sentry]'``).

```python
sentry_sdk.init(dsn=..., release=...)          # yours: jobq only reports
app.on_failure(jobq.tasks.sentry.sentry_hook())  # or sentry_hook(final_only=True)
```

Each failed attempt becomes one Sentry event: the handler's exception with its traceback (a
fact found about an unrun job, such as its crash count spent, is a message), tagged with the
job's kind and queue and the worker's decision, its id, attempt and reason in the ``jobq``
context. ``final_only``: report a job only when it will not run again (dead or cancelled).
"""

from __future__ import annotations

from collections.abc import Callable

import sentry_sdk

from jobq.tasks.hooks import Failure


def sentry_hook(*, final_only: bool = False) -> Callable[[Failure], None]:
    """A failure hook (``app.on_failure``) that reports to the Sentry client you set up."""

    def report(failure: Failure) -> None:
        if final_only and not failure.final:
            return
        job, decision = failure.job, failure.decision
        with sentry_sdk.new_scope() as scope:
            scope.set_tag("jobq.kind", job.kind)
            scope.set_tag("jobq.queue", job.queue)
            scope.set_tag("jobq.outcome", decision.outcome.value)
            scope.set_context("jobq", {"job_id": job.id, "attempt": job.attempt,
                                       "max_attempts": job.max_attempts,
                                       "reason": decision.reason})
            if failure.error is not None:
                sentry_sdk.capture_exception(failure.error)
            else:
                sentry_sdk.capture_message(f"job {job.id} ({job.kind}): {decision.reason}",
                                           level="error")

    return report
