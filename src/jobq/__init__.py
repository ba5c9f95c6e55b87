"""jobq: one job consumer, two interchangeable queue backends (PostgreSQL and RabbitMQ)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobq.core.errors import (
    ConfigError,
    ConnectionLost,
    JobqError,
    JobTooLarge,
    MalformedJob,
    PermanentError,
    QueueFull,
    Retry,
    TransactionOwned,
    TransactionRequired,
    TransportError,
    UnknownKind,
)
from jobq.core.job import Delivery, Job, Outcome
from jobq.core.port import NewJob

if TYPE_CHECKING:  # imported on first use (below): `import jobq` stays light for the CLIs
    from jobq.sync import SyncPublisher
    from jobq.tasks import App, CallNext, Context, Failure, Middleware, Task

__all__ = [
    "App",
    "CallNext",
    "ConfigError",
    "ConnectionLost",
    "Context",
    "Delivery",
    "Failure",
    "Job",
    "JobTooLarge",
    "JobqError",
    "MalformedJob",
    "Middleware",
    "NewJob",
    "Outcome",
    "PermanentError",
    "QueueFull",
    "Retry",
    "SyncPublisher",
    "Task",
    "TransactionOwned",
    "TransactionRequired",
    "TransportError",
    "UnknownKind",
]
__version__ = "0.1.0"

_TASKS = frozenset({"App", "CallNext", "Context", "Failure", "Middleware", "Task"})


def __getattr__(name: str) -> Any:
    if name in _TASKS:
        import jobq.tasks

        return getattr(jobq.tasks, name)
    if name == "SyncPublisher":
        from jobq.sync import SyncPublisher

        return SyncPublisher
    raise AttributeError(f"module 'jobq' has no attribute {name!r}")
