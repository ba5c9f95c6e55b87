"""The jobs of a small shop, as tasks: a receipt e-mail, a partner's webhook, a nightly report.

A web handler calls ``checkout`` (it enqueues, in the same transaction as the order when the
queue is PostgreSQL's); a consumer runs the tasks::

    cd examples/shop && consumer -A shop_tasks:app --config shop.yaml

``shop.yaml`` also schedules ``daily_report`` every night at 03:00. The outbox and the
partner API below stand in for an SMTP client and an HTTP client: what a start-up hook
would open once per consumer process, and a shutdown hook close.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import jobq

app = jobq.App()


@dataclass(frozen=True)
class Receipt:
    order_id: int
    email: str
    total_cents: int


@dataclass(frozen=True)
class PartnerEvent:
    order_id: int
    event: str = "order.paid"


@dataclass(frozen=True)
class Report:
    days_back: int = 1


@dataclass
class Outbox:
    """Stands in for an SMTP client: what it would have sent."""

    sent: list[tuple[str, str]] = field(default_factory=list)
    open: bool = True

    async def send(self, to: str, subject: str) -> None:
        if not self.open:
            raise RuntimeError("the outbox is closed")
        self.sent.append((to, subject))


@dataclass
class PartnerApi:
    """Stands in for an HTTP client to a partner; ``down`` makes every call fail."""

    calls: list[tuple[int, str]] = field(default_factory=list)
    down: bool = False

    async def post(self, order_id: int, event: str) -> None:
        if self.down:
            raise ConnectionError("partner API unreachable")
        self.calls.append((order_id, event))


@app.on_startup
async def open_clients(state: SimpleNamespace) -> None:
    state.outbox = Outbox()
    state.partner = PartnerApi()
    state.reports = []
    state.failures = []


@app.on_failure
def remember_failure(failure: jobq.Failure) -> None:
    """Where a real shop pages someone or counts a metric (or reports with jobq.tasks.sentry)."""
    app.state.failures.append((failure.job.kind, failure.job.attempt,
                               failure.decision.outcome.value))


@app.on_shutdown
async def close_clients(state: SimpleNamespace) -> None:
    state.outbox.open = False


@app.task(retries=5, timeout=30)
async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    """E-mail the receipt of a paid order."""
    await ctx.state.outbox.send(args.email, f"Receipt for order {args.order_id}: "
                                            f"{args.total_cents / 100:.2f} EUR")


@app.task(retries=8, timeout=10)
async def notify_partner(args: PartnerEvent, ctx: jobq.Context) -> None:
    """Tell the partner's API; retried with backoff while it is down."""
    await ctx.state.partner.post(args.order_id, args.event)


@app.task(retries=2, timeout=600)
def daily_report(args: Report, ctx: jobq.Context) -> None:
    """Recompute yesterday's report: CPU work, so a plain def (a handler thread)."""
    ctx.state.reports.append(f"report for {args.days_back} day(s) back")


async def checkout(order_id: int, email: str, total_cents: int) -> None:
    """What the web handler calls once an order is paid."""
    await send_receipt.enqueue(Receipt(order_id, email, total_cents))
    await notify_partner.enqueue(PartnerEvent(order_id))
