"""jobq: one job consumer, two interchangeable queue backends (PostgreSQL and RabbitMQ)."""

from __future__ import annotations

from jobq.errors import (
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
from jobq.job import Delivery, Job, Outcome

__all__ = [
    "ConfigError",
    "ConnectionLost",
    "Delivery",
    "Job",
    "JobTooLarge",
    "JobqError",
    "MalformedJob",
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
