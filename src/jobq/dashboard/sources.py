"""The queues a dashboard shows: each one's Admin, opened on first use and again after a failure."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from jobq.core.errors import ConfigError, ConnectionLost, TransportError, describe
from jobq.core.port import Admin
from jobq.core.within import within

T = TypeVar("T")
CALL_TIMEOUT = 10.0  # seconds one backend call of a page may take
RETRY_AFTER = 5.0  # a source that failed is not tried again sooner
SAMPLE_EVERY = 5.0  # seconds between depth samples (the chart)
SAMPLES = 120  # kept: ten minutes at SAMPLE_EVERY
SCRAPE_TIMEOUT = 2.0  # seconds a consumer's /metrics may take

Opener = Callable[[], contextlib.AbstractAsyncContextManager[Admin]]
log = logging.getLogger("jobq.dashboard")


class SourceDown(Exception):
    """The backend of a source did not answer; the text says why (no password in it)."""


@dataclass
class Source:
    """One queue on one backend, as configured for the dashboard."""

    name: str  # "<transport>/<queue>", unique on the page
    transport: str
    queue: str
    address: str  # where its server is, for the banner
    opener: Opener
    home: str = ""  # its backend (server and schema or vhost, no password): queues found there
    history: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=SAMPLES))
    # Jobs done per second, from the consumers' metrics (Throughput), when configured.
    rates: collections.deque[tuple[float, float]] = field(
        default_factory=lambda: collections.deque(maxlen=SAMPLES))
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)
    _stack: contextlib.AsyncExitStack | None = None
    _admin: Admin | None = None
    _failed_at: float = 0.0
    _problem: str | None = None

    @property
    def problem(self) -> str | None:
        """Why the last call failed (None while the backend answers)."""
        return self._problem

    async def call(self, use: Callable[[Admin], Awaitable[T]], *,
                   timeout: float = CALL_TIMEOUT, whole: bool = False) -> T:
        """``use(admin)`` within ``timeout``; SourceDown if the backend does not answer.

        ConfigError (an unknown id, a state the backend cannot list) passes through: the
        backend answered, the request was wrong. Only a lost connection closes it (to be opened
        again): a slow call or an unexpected error fails that request alone. ``whole``: an
        action, which no timeout or page left early cuts in the middle (a requeue cut between
        its publish and its ack would run a job twice). On RabbitMQ one call at a time: the
        dead letters are read by taking them, and two readers would each see part.
        """
        admin = await self._open()
        work = asyncio.ensure_future(self._serially(use, admin))
        try:
            return await (asyncio.shield(work) if whole else within(work, timeout))
        except ConfigError:
            raise
        except (ConnectionLost, OSError) as exc:
            await self._down(describe(exc), admin)
            raise SourceDown(self._problem or "unreachable") from exc
        except TimeoutError as exc:
            raise SourceDown(f"no answer within {timeout:g}s") from exc
        except TransportError as exc:  # the server answered with an error: this request's
            raise SourceDown(describe(exc)) from exc
        except Exception as exc:  # a bug below: logged in full, and the page still renders
            log.error("%s: the dashboard's call failed unexpectedly", self.name, exc_info=exc)
            raise SourceDown(describe(exc)) from exc

    async def _serially(self, use: Callable[[Admin], Awaitable[T]], admin: Admin) -> T:
        if self.transport != "rabbitmq":
            return await use(admin)
        async with self._one_at_a_time:
            return await use(admin)

    async def _open(self) -> Admin:
        if self._admin is not None:
            return self._admin
        async with self._opening:  # a page and the sampler at once open it once
            return await self._open_now()

    async def _open_now(self) -> Admin:
        if self._admin is not None:
            return self._admin
        if self._problem and time.monotonic() - self._failed_at < RETRY_AFTER:
            raise SourceDown(self._problem)
        stack = contextlib.AsyncExitStack()
        try:
            admin = await within(stack.enter_async_context(self.opener()),
                                           CALL_TIMEOUT)
        except (TransportError, ConfigError, TimeoutError, OSError) as exc:
            await stack.aclose()
            await self._down(describe(exc) if not isinstance(exc, TimeoutError) else
                             f"no answer within {CALL_TIMEOUT:g}s")
            raise SourceDown(self._problem or "unreachable") from exc
        except Exception as exc:
            log.error("%s: opening its backend failed unexpectedly", self.name, exc_info=exc)
            await stack.aclose()
            await self._down(describe(exc))
            raise SourceDown(self._problem or "failed") from exc
        self._stack, self._admin, self._problem = stack, admin, None
        return admin

    async def _down(self, why: str, admin: Admin | None = None) -> None:
        """Close the connection (``admin``'s only: one opened since stays) and note why."""
        if admin is not None and admin is not self._admin:
            return
        self._problem, self._failed_at = why, time.monotonic()
        stack, self._stack, self._admin = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def close(self) -> None:
        """Close the backend's connection."""
        await self._down("closed")

    async def sample(self) -> None:
        """Note how many jobs wait now (the chart); a failure only leaves a gap."""
        with contextlib.suppress(SourceDown):
            depth = await self.call(lambda a: a.depth())
            waiting = sum(n or 0 for state, n in depth.depth.items()
                          if state in ("pending", "ready", "retry"))
            self.history.append((time.time(), waiting))


def scrape_done(url: str) -> dict[tuple[str, str], float]:
    """``jobq_jobs_total{outcome="ok"}`` of one consumer's /metrics, by (transport, queue)."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as answer:
        text = answer.read().decode("utf-8", "replace")
    done: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "jobq_jobs_total" and sample.labels.get("outcome") == "ok":
                key = (sample.labels.get("transport", ""), sample.labels.get("queue", ""))
                done[key] = done.get(key, 0.0) + sample.value
    return done


class Throughput:
    """Jobs done per second by queue, from the consumers' counters (``dashboard.metrics``).

    Each sample adds up ``jobq_jobs_total{outcome="ok"}`` over every consumer that answered and
    compares it with the last sample's; a consumer that did not answer, or whose counter went
    back (it restarted), makes that one rate unknown rather than wrong.
    """

    def __init__(self, urls: list[str]) -> None:
        self._urls = urls
        self._last: tuple[float, dict[str, dict[tuple[str, str], float]]] | None = None

    async def sample(self, sources: list[Source]) -> None:
        """Scrape every URL; append each source's rate to its ``rates``."""
        if not self._urls:
            return
        now = time.monotonic()
        got = await asyncio.gather(*(asyncio.to_thread(scrape_done, u) for u in self._urls),
                                   return_exceptions=True)
        totals = {url: r for url, r in zip(self._urls, got, strict=True)
                  if not isinstance(r, BaseException)}
        last, self._last = self._last, (now, totals)
        if last is None:
            return
        then, before = last
        if now - then <= 0:
            return
        for src in sources:
            key = (src.transport, src.queue)
            pairs = [(before[u].get(key, 0.0), totals[u].get(key, 0.0)) for u in totals
                     if u in before]
            if len(pairs) != len(self._urls) or any(b > a for b, a in pairs):
                continue  # a consumer missing from either sample, or restarted: no rate
            src.rates.append((time.time(), round(sum(a - b for b, a in pairs) / (now - then), 1)))


@contextlib.asynccontextmanager
async def sampling(sources: list[Source], every: float = SAMPLE_EVERY,
                   throughput: Throughput | None = None,
                   find: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[None]:
    """Sample every source's depth (and, with ``throughput``, its rate) every ``every`` s;
    ``find`` first each time (the queues found since join ``sources``)."""
    async def loop() -> None:
        while True:
            try:
                if find is not None:
                    await find()
                await asyncio.gather(*(s.sample() for s in sources),
                                     *([throughput.sample(sources)] if throughput else []))
            except Exception as exc:  # the chart misses a sample; the sampling goes on
                log.warning("dashboard sample failed: %s", describe(exc), exc_info=exc)
            await asyncio.sleep(every)

    task = asyncio.create_task(loop(), name="jobq-dashboard-samples")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def points(history: collections.deque[tuple[float, int]] | collections.deque[tuple[float, float]],
           width: int = 600, height: int = 120) -> dict[str, Any]:
    """The chart's polyline (SVG coordinates) and its scale, from the samples."""
    if len(history) < 2:
        return {"points": "", "top": 0, "minutes": 0}
    first, last = history[0][0], history[-1][0]
    span = max(last - first, 1e-9)
    top = max(1.0, max(n for _, n in history))
    coords = " ".join(f"{(t - first) / span * width:.1f},{height - n / top * height:.1f}"
                      for t, n in history)
    return {"points": coords, "top": top, "minutes": round(span / 60, 1)}
