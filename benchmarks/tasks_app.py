"""The benchmark's no-op job as a task of a ``jobq.App`` (``--targets postgres-lease-tasks``).

The same completion record as ``benchmarks.processors.record``, reached through what a task
adds to a plain processor: the app's routing by kind, the arguments decoded and validated
into a dataclass (msgspec), the ``Context``. Run beside ``postgres-lease`` it measures what
tasks cost (docs/tasks.md). The record's directory and the start gate come from the
environment (``jobq_tasks_consumer`` sets them): an app takes no processor arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace

import jobq
from benchmarks.processors import Gate, Recorder

app = jobq.App()


@dataclass
class Numbered:
    """The producer's payload: its number, when it was sent (``--stamp``), padding."""

    n: int
    sent_at: float = 0.0
    pad: str = ""


@app.on_startup
def open_record(state: SimpleNamespace) -> None:
    state.record = Recorder(os.environ["JOBQ_BENCH_RECORD_DIR"])
    state.gate = Gate(os.environ.get("JOBQ_BENCH_GATE", ""))


@app.task(name="bench")
async def bench(args: Numbered, ctx: jobq.Context) -> None:
    """No-op: records its completion."""
    state = ctx.state
    if not state.gate.open:
        await state.gate.wait()
    state.record.add(args.n, args.sent_at)
