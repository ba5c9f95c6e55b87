"""Checked by mypy --strict in tests/unit/test_tasks_typing.py: a wrong-typed enqueue must fail.

Each line marked ``# error:`` must be reported by mypy with that text; no other line may be.
"""

from __future__ import annotations

from dataclasses import dataclass

import jobq


@dataclass
class Receipt:
    order_id: int
    to: str


@dataclass
class Refund:
    order_id: int


app = jobq.App()


@app.task(retries=5, timeout=30, queue="mail", priority=2)
async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    print(args.order_id + 1, ctx.attempt)


@app.task
def archive(args: Refund, ctx: jobq.Context) -> None:
    print(args.order_id)


async def produce() -> None:
    async with app:
        await send_receipt.enqueue(Receipt(order_id=42, to="a@example.com"))
        await archive.enqueue(Refund(order_id=1))
        await send_receipt.enqueue(Refund(order_id=42))  # error: Argument 1 to "enqueue" of "Task" has incompatible type "Refund"; expected "Receipt"
        await archive.enqueue(Receipt(order_id=1, to="b"))  # error: Argument 1 to "enqueue" of "Task" has incompatible type "Receipt"; expected "Refund"
        await send_receipt.enqueue(Receipt(order_id=1, to="c"), priority="high")  # error: Argument "priority" to "enqueue" of "Task" has incompatible type "str"; expected "int | None"
