"""A small app of tasks for the tests (``consumer -A tests.tasks_app:app``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import jobq


@dataclass
class Receipt:
    order_id: int
    to: str


app = jobq.App()


def _record(args: Receipt, ctx: jobq.Context, event: str) -> None:
    directory = Path(os.environ["JOBQ_TEST_RECORD"])
    directory.mkdir(parents=True, exist_ok=True)
    line = {"id": ctx.job.id, "kind": ctx.job.kind, "attempt": ctx.attempt, "event": event,
            "order_id": args.order_id, "to": args.to}
    with (directory / f"{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


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
