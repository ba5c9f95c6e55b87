"""The shop's task: a receipt for each order (run by ``consumer -A examples.fastapi_shop.tasks:jobs``)."""

from __future__ import annotations

from dataclasses import dataclass

import jobq

jobs = jobq.App()  # the defaults, and the JOBQ_... variables


@dataclass
class Receipt:
    order_id: int
    email: str


@jobs.task(retries=3)
async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    """Would send the e-mail; prints it here."""
    print(f"receipt for order {args.order_id} to {args.email}")
