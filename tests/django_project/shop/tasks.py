"""The shop's task, run by ``manage.py jobq_consume``: a plain def, so the ORM runs in one of
the consumer's threads."""

from __future__ import annotations

from dataclasses import dataclass

import jobq

app = jobq.App()


@dataclass
class Receipt:
    order_id: int


@app.task
def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    from tests.django_project.shop.models import Order

    Order.objects.filter(id=args.order_id).update(receipt_sent=True)
