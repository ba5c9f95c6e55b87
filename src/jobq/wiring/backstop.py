"""The last bound on a shutdown: a consumer still alive past it logs every stack and exits.

Every step of a graceful stop has its own deadline (running jobs, releases, statements,
publishes, closes: docs/architecture.md, *Faults*). The backstop is there for the step that
does not keep its deadline (a library that swallows a cancel, a thread that never returns, a
bug of ours): armed at the first SIGTERM, it runs on a thread of its own, so an event loop
that blocks after that cannot stop it (one already blocked when the signal comes does not
take the signal at all, graceful stop included, until it is free again), and when the bound
passes it logs where every task and thread waits, then ends the process with ``os._exit``
(exit code 1). What the consumer held and had not
settled comes back by itself (its lease expires, its channel closes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from types import TracebackType

from jobq.config import Settings
from jobq.observability.stacks import render_stacks
from jobq.worker.bounds import APP_HOOKS_BOUND, INTERRUPT_GRACE, RELEASE_TIMEOUT

EXIT_OVERRAN = 1
LOG_GRACE = 5.0  # seconds the stacks may take to be logged before the exit comes anyway
CLOSING = 15.0  # closing the transport and its connections once the calls in flight are cut
CANCEL_GRACE = 1.0  # a cut statement's cancel (postgres/connect.py); a publish's close


def network_deadline(settings: Settings) -> float:
    """The longest one call to the server may take: a statement or a publish."""
    if settings.transport == "postgres":
        return settings.postgres.network_deadline
    if settings.transport == "rabbitmq":
        return settings.rabbitmq.publish_timeout
    return 1.0


def calls(settings: Settings, count: int) -> float:
    """Seconds ``count`` calls to the server may take one after another, each cut at its
    deadline (and given CANCEL_GRACE to let go)."""
    return count * (network_deadline(settings) + CANCEL_GRACE)


def closing_bound(settings: Settings) -> float:
    """Seconds the consumer may take to close once its pool has stopped: two calls in flight
    (the last ack flush, a copy or a statement a close cut) and the closes themselves; for an
    app's consumer, its failure and shutdown hooks too (APP_HOOKS_BOUND)."""
    hooks = APP_HOOKS_BOUND if settings.consumer.app else 0.0
    return calls(settings, 2) + CLOSING + hooks


def shutdown_bound(settings: Settings) -> float:
    """Seconds from SIGTERM to exit at most: the receive in flight (a claim and the release
    of what it took: two calls), running jobs ``consumer.shutdown_timeout`` (a plain ``def``
    handler's thread INTERRUPT_GRACE more), handing back the unstarted RELEASE_TIMEOUT (at
    most the shutdown timeout), then ``closing_bound``."""
    timeout = settings.consumer.shutdown_timeout
    return (calls(settings, 2) + timeout + INTERRUPT_GRACE + min(RELEASE_TIMEOUT, timeout)
            + closing_bound(settings))


class Backstop:
    """Ends the process once an armed deadline passes; disarmed when the context is left."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._deadline: float | None = None  # time.monotonic() at which to end the process
        self._bound = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = threading.Condition()
        self._done = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Backstop:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._changed:
            self._done = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()

    def arm(self, seconds: float) -> None:
        """End the process ``seconds`` from now unless it is over by then (or an earlier arm
        fires first). Called from the event loop, whose tasks the stacks will show."""
        deadline = time.monotonic() + seconds
        with self._changed:
            if self._done or (self._deadline is not None and self._deadline <= deadline):
                return
            self._deadline, self._bound = deadline, seconds
            self._loop = asyncio.get_running_loop()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="jobq-backstop",
                                                daemon=True)
                self._thread.start()
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while not self._done:
                assert self._deadline is not None
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            if self._done:
                return
            bound, loop = self._bound, self._loop
        assert loop is not None
        # Logging takes the handlers' locks, which a wedged writer (a full stderr pipe) may
        # hold for good: whatever happens to the log, the process ends LOG_GRACE later.
        last = threading.Timer(LOG_GRACE, os._exit, (EXIT_OVERRAN,))
        last.daemon = True
        last.start()
        try:
            stacks = render_stacks(loop)
        except Exception as exc:  # read from another thread while the loop runs: best effort
            stacks = f"(could not read them: {exc!r})"
        self._log.error(
            "shutdown still not over %gs after it began (the bound of consumer.shutdown_timeout "
            "plus the network deadlines): exiting now; jobs not settled come back when their "
            "lease expires or their channel closes. Where it waited:\n%s", bound, stacks)
        for handler in logging.getLogger().handlers + self._log.handlers:
            handler.flush()
        os._exit(EXIT_OVERRAN)
