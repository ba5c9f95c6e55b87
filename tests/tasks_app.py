"""A small app of tasks for the tests (``consumer -A tests.tasks_app:app``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jobq


@dataclass
class Receipt:
    order_id: int
    to: str


app = jobq.App()


def _write(line: dict[str, object]) -> None:
    directory = Path(os.environ["JOBQ_TEST_RECORD"])
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / f"{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


def _record(args: Receipt, ctx: jobq.Context, event: str) -> None:
    _write({"id": ctx.job.id, "kind": ctx.job.kind, "attempt": ctx.attempt, "event": event,
            "order_id": args.order_id, "to": args.to, "opened": ctx.state.opened})


@app.on_startup
async def open_resources(state: SimpleNamespace) -> None:
    """What a real app would open once per process (an HTTP client, a pool)."""
    state.opened = os.getpid()
    _write({"event": "startup"})


@app.on_shutdown
def close_resources(state: SimpleNamespace) -> None:
    _write({"event": "shutdown", "opened": state.opened})


@app.on_failure
async def report(failure: jobq.Failure) -> None:
    """Each failed attempt, as the worker decided it."""
    _write({"event": "failure", "id": failure.job.id, "attempt": failure.job.attempt,
            "outcome": failure.decision.outcome.value, "error": repr(failure.error)})


@app.task(retries=2)
async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    """Records the receipt it would send; an order id below 0 fails (retried, then dead)."""
    if args.order_id < 0:
        raise RuntimeError(f"no order {args.order_id}")
    _record(args, ctx, "sent")


@app.task(name="receipt.archive")
def archive_receipt(args: Receipt, ctx: jobq.Context) -> None:
    """A plain ``def``: runs in one of the consumer's handler threads."""
    _record(args, ctx, "archived")
