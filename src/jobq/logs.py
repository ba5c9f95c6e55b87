"""Log set-up for the command-line programs: text for people, JSON lines for machines."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_EXTRA = ("job_id", "attempt", "outcome", "duration", "queue", "transport")


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


def configure(level: str = "info", fmt: str = "text") -> None:
    """Send jobq's logs to stderr in ``fmt`` at ``level`` (called once by the CLI)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
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
