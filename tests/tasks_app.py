"""A small app of tasks for the tests (``consumer -A tests.tasks_app:app``)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jobq
from jobq.core.job import Decision


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
            "order_id": args.order_id, "to": args.to, "opened": ctx.state.opened,
            "around": around.get()})


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


# What a task sees of the middleware around it: set there, read in the task (same job task).
around: contextvars.ContextVar[str] = contextvars.ContextVar("around", default="")


@app.middleware
async def stamp(job: jobq.Job, call_next: jobq.CallNext) -> None:
    """Around each run: a context the task reads, and a record after it, however it ended."""
    token = around.set(f"stamped {job.id}")
    ended = "raised"
    try:
        await call_next(job)
        ended = "returned"
    finally:
        around.reset(token)
        _write({"event": "after", "id": job.id, "ended": ended})


class Outcomes(jobq.Middleware):
    """After each decision, carried out: what the worker decided."""

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: jobq.Job) -> None:
        _write({"event": "settled", "id": job.id, "outcome": decision.outcome.value})


app.middleware(Outcomes())


@app.task(timeout=0.3, retries=0)
async def slow(args: Receipt, ctx: jobq.Context) -> None:
    """Runs past its timeout: cancelled at 0.3 s, the attempt fails, and it has no retries."""
    await asyncio.sleep(30)


@app.task(unique="report-{order_id}", delay=3600.0, retry_delay=0.05)
async def report_later(args: Receipt, ctx: jobq.Context) -> None:
    """Keyed by its order and an hour away: enqueued twice, it is one job (PostgreSQL)."""
    _record(args, ctx, "reported")
