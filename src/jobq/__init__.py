"""jobq: one job consumer, two interchangeable queue backends (PostgreSQL and RabbitMQ)."""

from __future__ import annotations

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

__all__ = [
    "ConfigError",
    "ConnectionLost",
    "Delivery",
    "Job",
    "JobTooLarge",
    "JobqError",
    "MalformedJob",
    "NewJob",
    "Outcome",
    "PermanentError",
    "QueueFull",
    "Retry",
    "TransactionOwned",
    "TransactionRequired",
    "TransportError",
    "UnknownKind",
]
__version__ = "0.1.0"
