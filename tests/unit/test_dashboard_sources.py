"""The dashboard's sources: a backend that fails is a SourceDown (a banner), tried again
after RETRY_AFTER, and served again once it answers; a bad request passes through."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobq.core.errors import ConfigError, ConnectionLost
from jobq.core.port import Depth
from jobq.dashboard import sources
from jobq.dashboard.security import Guard
from jobq.dashboard.sources import Source, SourceDown, points


class FakeAdmin:
    async def depth(self) -> Depth:
        return Depth(depth={"pending": 3})

    async def show_job(self, job_id: str) -> Any:
        raise ConfigError(f"no job with id {job_id}", key="--id")


async def test_down_then_up_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(sources.time, "monotonic", lambda: clock[0])
    up = [False]
    opened = []

    @contextlib.asynccontextmanager
    async def opener() -> AsyncIterator[Any]:
        opened.append(clock[0])
        if not up[0]:
            raise ConnectionLost("PostgreSQL at 127.0.0.1:1 refused the connection")
        yield FakeAdmin()

    src = Source(name="postgres/q", transport="postgres", queue="q", address="127.0.0.1:1",
                 opener=opener)
    with pytest.raises(SourceDown, match="refused"):
        await src.call(lambda a: a.depth())
    with pytest.raises(SourceDown):  # within RETRY_AFTER: not tried again
        await src.call(lambda a: a.depth())
    assert len(opened) == 1
    up[0] = True
    clock[0] += sources.RETRY_AFTER
    assert (await src.call(lambda a: a.depth())).depth == {"pending": 3}
    assert src.problem is None
    with pytest.raises(ConfigError):  # the backend answered: the request was wrong
        await src.call(lambda a: a.show_job("9"))
    await src.sample()
    assert [n for _, n in src.history] == [3]


def test_the_guard_wants_a_session_its_csrf_and_no_foreign_origin() -> None:
    guard = Guard("tok")
    assert guard.login("nope") is None
    cookie = guard.login("tok")
    assert cookie is not None
    session = guard.session(cookie)
    token = guard.csrf(session)
    assert guard.allows(cookie, token, None, "h:1")
    assert guard.allows(cookie, token, "http://h:1", "h:1")
    assert not guard.allows(cookie, token, "http://evil:1", "h:1")
    assert not guard.allows(cookie, "x" * 64, None, "h:1")
    forged = cookie[:-1] + ("1" if cookie.endswith("0") else "0")
    assert not guard.allows(forged, token, None, "h:1")  # a forged cookie
    assert guard.session(cookie[:-1] + "é") is None  # any character: no session, no error
    assert not guard.allows(None, token, None, "h:1")
    assert Guard("").read_only and Guard("tok", read_only=True).login("tok") is None


def test_chart_points_scale_to_the_box() -> None:
    import collections

    empty: collections.deque[tuple[float, int]] = collections.deque()
    assert points(empty)["points"] == ""
    chart = points(collections.deque([(0.0, 0), (30.0, 10), (60.0, 5)]))
    assert chart["points"] == "0.0,120.0 300.0,0.0 600.0,60.0" and chart["top"] == 10


async def test_throughput_is_the_counters_rise_and_unknown_across_a_restart_or_a_gap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, Any] = {}

    def scrape(url: str) -> dict[tuple[str, str], float]:
        answer = answers[url]
        if isinstance(answer, Exception):
            raise answer
        return {("postgres", "q"): answer}

    monkeypatch.setattr(sources, "scrape_done", scrape)
    clock = [1000.0]
    monkeypatch.setattr(sources.time, "monotonic", lambda: clock[0])

    @contextlib.asynccontextmanager
    async def never() -> AsyncIterator[Any]:
        raise AssertionError("not opened")
        yield

    src = Source(name="postgres/q", transport="postgres", queue="q", address="-", opener=never)
    meter = sources.Throughput(["a", "b"])
    answers.update(a=100.0, b=50.0)
    await meter.sample([src])  # the first sample only sets the base
    clock[0] += 5
    answers.update(a=600.0, b=300.0)  # 500 + 250 in 5 s
    await meter.sample([src])
    assert [r for _, r in src.rates] == [150.0]
    clock[0] += 5
    answers.update(a=10.0, b=400.0)  # a restarted: its counter went back
    await meter.sample([src])
    clock[0] += 5
    answers.update(a=OSError("refused"), b=500.0)  # a did not answer
    await meter.sample([src])
    assert [r for _, r in src.rates] == [150.0]  # neither gave a (wrong) rate
