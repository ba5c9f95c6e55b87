"""The shop's tests, written as its team would: jobq.testing, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

import jobq.testing
import shop_tasks
from jobq.config import load_settings
from jobq.feeds.schedules import parse_schedules
from shop_tasks import PartnerEvent, Receipt, Report, app, checkout


async def test_checkout_enqueues_the_receipt_and_the_partners_event() -> None:
    async with jobq.testing.worker(app) as worker:
        await checkout(42, "ada@example.com", 1999)
        worker.assert_enqueued(shop_tasks.send_receipt, Receipt(42, "ada@example.com", 1999))
        worker.assert_enqueued(shop_tasks.notify_partner, PartnerEvent(42))


async def test_the_receipt_is_sent_and_the_partner_told() -> None:
    async with jobq.testing.worker(app) as worker:
        await checkout(7, "bob@example.com", 500)
        await worker.drain()
        assert app.state.outbox.sent == [("bob@example.com", "Receipt for order 7: 5.00 EUR")]
        assert app.state.partner.calls == [(7, "order.paid")]


async def test_a_partner_down_is_retried_then_dead_and_the_failure_hook_hears_it() -> None:
    async with jobq.testing.worker(app) as worker:
        app.state.partner.down = True
        await shop_tasks.notify_partner.enqueue(PartnerEvent(9))
        with pytest.raises(ConnectionError, match="partner API unreachable"):
            await worker.drain()
        (job,) = worker.store.entries.values()
        assert (job.status, job.attempts) == ("dead", 9)
    assert app.state.failures == [("notify_partner", n, "retried") for n in range(1, 9)] + [
        ("notify_partner", 9, "dead")]


async def test_checkout_in_eager_mode_sends_at_once() -> None:
    app.state.outbox, app.state.partner = shop_tasks.Outbox(), shop_tasks.PartnerApi()
    with jobq.testing.eager(app):
        await checkout(3, "cy@example.com", 100)
    assert app.state.outbox.sent == [("cy@example.com", "Receipt for order 3: 1.00 EUR")]


async def test_the_nightly_schedule_enqueues_a_valid_report() -> None:
    settings = load_settings(Path(__file__).with_name("shop.yaml"))
    (nightly,) = parse_schedules(settings.schedules, "shop.yaml")
    assert nightly.kind == shop_tasks.daily_report.kind
    report = shop_tasks.daily_report.arguments.decode(nightly.payload)
    assert report == Report(days_back=1)
    async with jobq.testing.worker(app) as worker:
        await shop_tasks.daily_report.enqueue(report)
        await worker.drain()
        assert app.state.reports == ["report for 1 day(s) back"]
