"""An app's hooks (on_failure, on_startup, on_shutdown), eager mode and assert_enqueued."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

import jobq
import jobq.tasks.hooks
import jobq.testing
from jobq.core.errors import HookFailed, InvalidArguments
from jobq.core.job import Dead, RetryIn


@dataclass
class Order:
    order_id: int
    lines: tuple[str, ...] = ()


def make_app(log: list[str]) -> tuple[jobq.App, jobq.Task[Order]]:
    app = jobq.App()

    @app.on_startup
    async def open_client(state: SimpleNamespace) -> None:
        state.client = "client"
        log.append("startup")

    @app.on_shutdown
    def close_client(state: SimpleNamespace) -> None:
        log.append(f"shutdown {state.client}")

    @app.task(retries=2)
    async def charge(args: Order, ctx: jobq.Context) -> None:
        log.append(f"charge {args.order_id} via {ctx.state.client} attempt {ctx.attempt}")
        if args.order_id < 0:
            raise ValueError(f"bad order {args.order_id}")

    return app, charge


async def test_failure_hooks_hear_each_failed_attempt_with_the_workers_decision() -> None:
    log: list[str] = []
    app, charge = make_app(log)
    failures: list[jobq.Failure] = []
    later: list[str] = []

    @app.on_failure
    def remember(failure: jobq.Failure) -> None:
        failures.append(failure)

    @app.on_failure
    async def page(failure: jobq.Failure) -> None:
        later.append(f"{failure.job.attempt} final={failure.final}")

    async with jobq.testing.worker(app) as worker:
        await charge.enqueue(Order(-1))
        await charge.enqueue(Order(7))
        stats = await worker.drain(raise_errors=False)
    assert (stats.ok, stats.retried, stats.dead) == (1, 2, 1)
    assert [type(f.decision) for f in failures] == [RetryIn, RetryIn, Dead]
    assert [f.job.attempt for f in failures] == [1, 2, 3]
    assert all(isinstance(f.error, ValueError) for f in failures)
    assert failures[-1].decision.reason == "ValueError: bad order -1 (gave up after 3 of 3 attempts)"
    assert later == ["1 final=False", "2 final=False", "3 final=True"]  # awaited by the exit
    assert log[0] == "startup" and log[-1] == "shutdown client"
    assert "charge 7 via client attempt 1" in log


async def test_a_failure_hook_that_raises_is_logged_and_changes_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    app, charge = make_app([])
    heard: list[int] = []

    @app.on_failure
    def broken(failure: jobq.Failure) -> None:
        raise KeyError("hook bug")

    @app.on_failure
    def kept(failure: jobq.Failure) -> None:
        heard.append(failure.job.attempt)

    async with jobq.testing.worker(app) as worker:
        await charge.enqueue(Order(-1))
        stats = await worker.drain(raise_errors=False)
    assert (stats.retried, stats.dead) == (2, 1) and heard == [1, 2, 3]
    said = [r for r in caplog.records if "failure hook" in r.getMessage()]
    assert len(said) == 3 and said[0].levelno == logging.ERROR
    assert "the job's fate stands" in said[0].getMessage() and said[0].exc_info is not None


async def test_a_start_up_hook_that_raises_names_itself_and_nothing_runs() -> None:
    log: list[str] = []
    app, _ = make_app(log)

    @app.on_startup
    def fails(state: SimpleNamespace) -> None:
        raise ConnectionError("no database")

    with pytest.raises(HookFailed, match=r"start-up hook \S*test_task_hooks\..*fails "
                                         r"failed: ConnectionError: no database"):
        async with jobq.testing.worker(app):
            pytest.fail("the block ran")
    assert log == ["startup"]


async def test_eager_runs_the_task_at_the_enqueue_and_raises_what_it_raised() -> None:
    log: list[str] = []
    app, charge = make_app(log)
    app.state.client = "eager client"
    with jobq.testing.eager(app):
        job_id = await charge.enqueue(Order(3, ("a", "b")))
        assert log == ["charge 3 via eager client attempt 1"]
        with pytest.raises(ValueError, match="bad order -2"):
            await charge.enqueue(Order(-2))
        with pytest.raises(InvalidArguments):  # checked at the call, as always
            await charge.enqueue(Order("x"))  # type: ignore[arg-type]
    assert job_id.startswith("eager-")


async def test_assert_enqueued_says_what_was_enqueued_instead() -> None:
    app, charge = make_app([])
    async with jobq.testing.worker(app) as worker:
        with pytest.raises(AssertionError, match=r"no job of task 'charge' was enqueued "
                                                 r"\(waiting: nothing\)"):
            worker.assert_enqueued(charge)
        await charge.enqueue(Order(1, ("x",)))
        worker.assert_enqueued(charge)
        worker.assert_enqueued(charge, Order(1, ("x",)))  # a tuple back from JSON
        with pytest.raises(AssertionError, match=r"with Order\(order_id=2.*enqueued: "
                                                 r"\[Order\(order_id=1"):
            worker.assert_enqueued(charge, Order(2))


async def test_a_failing_shutdown_hook_never_hides_the_error_that_ended_the_block(
        caplog: pytest.LogCaptureFixture) -> None:
    app, _ = make_app([])

    @app.on_shutdown
    def fails(state: SimpleNamespace) -> None:
        raise OSError("cannot close")

    with pytest.raises(LookupError, match="the test's own failure"):
        async with jobq.testing.worker(app):
            raise LookupError("the test's own failure")
    assert any("shutdown hook" in r.getMessage() and r.exc_info for r in caplog.records)
    with pytest.raises(HookFailed, match=r"shutdown hook .*fails failed: OSError: cannot close"):
        async with jobq.testing.worker(app):
            pass


async def test_hooks_that_outlast_their_bound_are_abandoned_and_said(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobq.tasks.hooks, "APP_HOOKS_BOUND", 0.05)
    app, _ = make_app([])
    stuck = asyncio.Event()

    @app.on_shutdown
    async def hangs(state: SimpleNamespace) -> None:
        await stuck.wait()  # never set

    async with jobq.testing.worker(app):
        pass
    assert any("did not end within 0.05s" in r.getMessage() for r in caplog.records)

