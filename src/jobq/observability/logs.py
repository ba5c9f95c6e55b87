"""Log set-up for the command-line programs: text for people, JSON lines for machines."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Fields copied into a JSON line when a record carries them (``extra=`` or the context filter).
_EXTRA = ("event", "job_id", "attempt", "outcome", "duration", "queue", "transport", "rate",
          "ok", "retried", "dead", "in_flight", "depth", "oldest_pending_seconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the job fields the pool attaches."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON object."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _EXTRA:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _Context(logging.Filter):
    """Stamps every record with the process's transport and queue (for JSON lines)."""

    def __init__(self, context: dict[str, str]) -> None:
        super().__init__()
        self._context = context

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self._context.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def configure(level: str = "info", fmt: str = "text", **context: str) -> None:
    """Send jobq's logs to stderr in ``fmt`` at ``level`` (called once by the CLI).

    ``context`` (e.g. ``transport=``, ``queue=``) is added to every JSON line.
    """
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        if context:
            handler.addFilter(_Context(context))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger("jobq")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # The AMQP driver logs each broker disconnect and failed connect (with tracebacks) on its
    # own; jobq translates those at the boundary and logs one line itself. Debug shows both.
    for name in ("aiormq", "aio_pika"):
        driver = logging.getLogger(name)
        driver.handlers[:] = [handler]
        driver.setLevel(logging.DEBUG if level == "debug" else logging.CRITICAL)
        driver.propagate = False
