"""The tasks of `make demo` (examples/life): one that works, one that fails once and is
retried, one that fails until its bug is fixed, and a delayed one.

Each task that ends well appends ``<task> <name>`` to ``$JOBQ_LIFE_DIR/done.log``, the demo's
evidence that it ran. ``charge`` fails while ``$JOBQ_LIFE_DIR/bug`` exists: the demo deletes
that file ("the fix is deployed") and retries the dead job from the command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import jobq

app = jobq.App()


@dataclass(frozen=True)
class Customer:
    name: str


def done(task: str, args: Customer) -> None:
    """Leave the evidence that ``task`` ran for ``args``."""
    with (Path(os.environ["JOBQ_LIFE_DIR"]) / "done.log").open("a", encoding="utf-8") as log:
        log.write(f"{task} {args.name}\n")


@app.task(retries=3, retry_delay=0.3)
async def welcome(args: Customer, ctx: jobq.Context) -> None:
    """E-mail a new customer (works the first time)."""
    done("welcome", args)


@app.task(retries=3, retry_delay=0.3)
async def sync_crm(args: Customer, ctx: jobq.Context) -> None:
    """Push the customer to a CRM whose first answer is a timeout: retried, then done."""
    if ctx.attempt == 1:
        raise TimeoutError("the CRM did not answer within 5 s")
    done("sync_crm", args)


@app.task(retries=1, retry_delay=0.3)
async def charge(args: Customer, ctx: jobq.Context) -> None:
    """Charge a card; fails on both attempts while the bug is there: dead, until retried."""
    if (Path(os.environ["JOBQ_LIFE_DIR"]) / "bug").exists():
        raise KeyError(f"no payment method for {args.name!r}")
    done("charge", args)


@app.task
async def remind(args: Customer, ctx: jobq.Context) -> None:
    """A reminder enqueued with a delay: runs when it is due, not before."""
    done("remind", args)
