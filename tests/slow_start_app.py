"""An app whose start-up hook blocks the event loop for a while (``JOBQ_TEST_STARTUP_BLOCK``
seconds), as importing a heavy library or a synchronous connect in a hook would."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from types import SimpleNamespace

import jobq

app = jobq.App()


@app.on_startup
async def open_slowly(state: SimpleNamespace) -> None:
    time.sleep(float(os.environ.get("JOBQ_TEST_STARTUP_BLOCK", "0")))  # noqa: ASYNC251 (the point)


@dataclass
class Nothing:
    pass


@app.task
async def nothing(args: Nothing, ctx: jobq.Context) -> None:
    """Runs and does nothing."""
