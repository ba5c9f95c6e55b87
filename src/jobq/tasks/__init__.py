"""Tasks declared in code: ``jobq.App``, ``@app.task`` and typed arguments.

- ``app``: ``App``, the tasks of an application, the publisher they enqueue with, and the
  handler a consumer runs them through (``consumer -A module:app``).
- ``task``: ``Task[A]``, one task: its kind, options and ``enqueue(args)``, checked by mypy
  against the handler's argument type; ``Context``, what a running task is handed beside its
  arguments.
- ``hooks``: ``Failure`` and the hooks of an app: ``on_failure`` after each failed attempt,
  ``on_startup`` / ``on_shutdown`` around a consumer process.
- ``app.middleware``: per-job middleware (``Middleware``, ``CallNext``: worker/middleware.py),
  around each run and after each decision, as jobq's own tracing and metrics are.
- ``sentry``: a failure hook that reports to Sentry (the ``jobq[sentry]`` extra).
- ``arguments``: an argument type's codec: a dataclass (msgspec) or a pydantic model, checked
  at enqueue (an error at the call, nothing written) and at run (dead at once if invalid).
"""

from __future__ import annotations

from jobq.tasks.app import App
from jobq.tasks.hooks import Failure
from jobq.tasks.task import Context, Task
from jobq.worker.middleware import CallNext, Middleware

__all__ = ["App", "CallNext", "Context", "Failure", "Middleware", "Task"]
