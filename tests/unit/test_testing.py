"""jobq.testing: an app's tasks tested in memory, as a user's test suite would."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import jobq
import jobq.testing
from jobq.core.errors import InvalidArguments

app = jobq.App()
sent: list[str] = []


@dataclass
class Receipt:
    order_id: int
    to: str


@app.task(retries=2)
async def send_receipt(args: Receipt, ctx: jobq.Context) -> None:
    if args.order_id < 0:
        raise RuntimeError(f"no order {args.order_id}")
    sent.append(f"{args.order_id}:{ctx.attempt}")
    if args.order_id == 42:  # a task that enqueues a follow-up
        await archive.enqueue(args)


@app.task
def archive(args: Receipt, ctx: jobq.Context) -> None:
    sent.append(f"archived {args.order_id}")


async def test_enqueued_jobs_are_seen_then_run_with_their_follow_ups() -> None:
    sent.clear()
    async with jobq.testing.worker(app) as worker:
        await send_receipt.enqueue(Receipt(order_id=42, to="a@example.com"))
        assert worker.enqueued(send_receipt) == [Receipt(order_id=42, to="a@example.com")]
        stats = await worker.drain()
        assert worker.enqueued(send_receipt) == []
    assert sent == ["42:1", "archived 42"]
    assert (stats.ok, stats.retried, stats.dead) == (2, 0, 0)


async def test_a_failing_task_fails_the_test_after_its_retries() -> None:
    sent.clear()
    async with jobq.testing.worker(app) as worker:
        await send_receipt.enqueue(Receipt(order_id=-1, to="a@example.com"))
        with pytest.raises(RuntimeError, match="no order -1"):
            await worker.drain()
        [entry] = worker.store.entries.values()
        assert (entry.status, entry.attempts) == ("dead", 3)
        stats = await worker.drain(raise_errors=False)  # nothing left: nothing raised
        assert stats.ok == stats.dead == 0


async def test_arguments_round_trip_through_json_in_tests_as_in_production() -> None:
    async with jobq.testing.worker(app):
        with pytest.raises(InvalidArguments):
            await send_receipt.enqueue(Receipt(order_id="7", to="a"))  # type: ignore[arg-type]


async def test_outside_the_block_the_app_is_as_before() -> None:
    async with jobq.testing.worker(app):
        pass
    with pytest.raises(jobq.ConfigError, match="the app is not open"):
        await send_receipt.enqueue(Receipt(order_id=1, to="a"))
