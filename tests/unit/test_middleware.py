"""Per-job middleware (worker/middleware.py): order, context, errors, and no cost unused."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

import jobq
import jobq.testing
from jobq.core.job import Decision, Job
from jobq.worker.middleware import Middleware, observer_of, wrapped


@dataclass
class Order:
    n: int


class Recording(Middleware):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def around(self, job: Job, call_next: jobq.CallNext) -> None:
        self.log.append(f"{self.name} before")
        try:
            await call_next(job)
        finally:
            self.log.append(f"{self.name} after")

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        self.log.append(f"{self.name} settled {decision.outcome.value}")


async def test_middleware_runs_in_the_order_added_around_the_task_then_hears_the_decision(
        ) -> None:
    log: list[str] = []
    app = jobq.App()
    app.middleware(Recording("outer", log))
    app.middleware(Recording("inner", log))

    @app.task
    async def work(args: Order, ctx: jobq.Context) -> None:
        log.append("task")

    async with jobq.testing.worker(app) as worker:
        await work.enqueue(Order(1))
        await worker.drain()
    assert log == ["outer before", "inner before", "task", "inner after", "outer after",
                   "outer settled ok", "inner settled ok"]


async def test_what_around_raises_fails_the_job_and_a_raising_settled_changes_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    app = jobq.App()
    ran: list[int] = []

    @app.middleware
    async def refuse_odd(job: Job, call_next: jobq.CallNext) -> None:
        if job.payload["n"] % 2:
            raise PermissionError("odd orders are refused")
        await call_next(job)

    class Broken(Middleware):
        def settled(self, decision: Decision, duration: float, error: BaseException | None,
                    job: Job) -> None:
            raise RuntimeError("a bug in a middleware")

    app.middleware(Broken())

    @app.task(retries=0)
    async def work(args: Order, ctx: jobq.Context) -> None:
        ran.append(args.n)

    async with jobq.testing.worker(app) as worker:
        await work.enqueue(Order(1))
        await work.enqueue(Order(2))
        with caplog.at_level(logging.ERROR, "jobq.middleware"):
            stats = await worker.drain(raise_errors=False)
    assert ran == [2] and (stats.ok, stats.dead) == (1, 1)
    dead = worker.store.by_status("dead")[0]
    assert dead.last_error is not None and dead.last_error.startswith(
        "PermissionError: odd orders are refused")
    assert caplog.text.count("middleware Broken failed on job") == 2


async def test_middleware_that_runs_nothing_around_a_job_costs_the_run_nothing() -> None:
    class AfterOnly(Middleware):
        pass

    async def handler(job: Job) -> None:
        pass

    assert wrapped([AfterOnly()], handler) is handler  # no link in the chain at all
    assert wrapped([], handler) is handler

    class Last:
        def settled(self, decision: Decision, duration: float, error: BaseException | None,
                    job: Job) -> None:
            pass

        def gauges(self, in_flight: int, buffered: int) -> None:
            pass

    last = Last()
    assert observer_of([], last) is last  # the metrics alone: no call more per job
