"""An app's hooks: ``on_failure`` after each failed attempt, ``on_startup`` / ``on_shutdown``
around a consumer process (or a ``jobq.testing`` block).

A failure hook gets a ``Failure``: the job, what the handler raised (None for a fact found
about an unrun job, such as a crash count spent), and the worker's decision (``RetryIn``,
``Dead`` or ``Cancelled``), once the transport has carried the decision out. Hooks never change a job's fate:
one that raises is logged and the others still run. A plain ``def`` hook runs on the event
loop, so it must be quick (Sentry's ``capture_exception`` is: it queues the event); an
``async def`` one runs as a task of its own, awaited at shutdown.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace

from jobq.core.errors import HookFailed
from jobq.core.job import Cancelled, Dead, Decision, Job, RetryIn
from jobq.worker.bounds import APP_HOOKS_BOUND
from jobq.worker.middleware import Middleware

log = logging.getLogger("jobq.tasks")


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the worker decided it."""

    job: Job
    error: BaseException | None  # None: a fact about an unrun job (its reason is the decision's)
    decision: RetryIn | Dead | Cancelled

    @property
    def final(self) -> bool:
        """True if the job will not run again (dead or cancelled)."""
        return not isinstance(self.decision, RetryIn)


FailureHook = Callable[[Failure], Awaitable[None] | None]
# What a start-up or shutdown hook gets: the app's ``state``, where it keeps what the tasks use.
LifecycleHook = Callable[[SimpleNamespace], Awaitable[None] | None]


def hook_name(hook: Callable[..., object]) -> str:
    """``module.qualname`` of a hook, for logs."""
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


class FailureHooks(Middleware):
    """The failure hooks as middleware (``settled`` only)."""

    def __init__(self, hooks: list[FailureHook]) -> None:
        self._hooks = hooks
        self._running: set[asyncio.Task[None]] = set()

    def settled(self, decision: Decision, duration: float, error: BaseException | None,
                job: Job) -> None:
        """Call the hooks for a retry, a dead or a cancelled job."""
        if isinstance(decision, RetryIn | Dead | Cancelled):
            failure = Failure(job, error, decision)
            for hook in self._hooks:
                self._call(hook, failure)

    def _call(self, hook: FailureHook, failure: Failure) -> None:
        try:
            result = hook(failure)
        except Exception as exc:
            _failed(hook, failure, exc)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(_awaited(hook, failure, result))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def wait(self) -> None:
        """Until the async hooks already called have ended (at shutdown)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


async def _awaited(hook: FailureHook, failure: Failure, result: Awaitable[None]) -> None:
    try:
        await result
    except Exception as exc:
        _failed(hook, failure, exc)


def _failed(hook: FailureHook, failure: Failure, exc: Exception) -> None:
    log.error("failure hook %s raised on job %s (%s); the job's fate stands", hook_name(hook),
              failure.job.id, failure.decision.outcome.value, exc_info=exc)


async def shut_down(observers: list[FailureHooks], hooks: list[LifecycleHook],
                    state: SimpleNamespace, *, raising: bool) -> None:
    """The async failure hooks still running, then the shutdown hooks, within APP_HOOKS_BOUND
    seconds (past it they are abandoned, with an ERROR). HookFailed if a shutdown hook raised,
    unless the block they close is ``raising`` already: its error is the one that counts
    (the hook's was logged)."""
    try:
        async with asyncio.timeout(APP_HOOKS_BOUND):
            for observer in observers:
                await observer.wait()
            await run_hooks(hooks, state, "shutdown")
    except TimeoutError:
        log.error("the app's failure and shutdown hooks did not end within %gs of its last "
                  "job: abandoned", APP_HOOKS_BOUND)
    except HookFailed:
        if not raising:
            raise


async def run_hooks(hooks: list[LifecycleHook], state: SimpleNamespace, what: str) -> None:
    """Run start-up or shutdown hooks in order; HookFailed names the one that raised."""
    for hook in hooks:
        try:
            result = hook(state)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.error("%s hook %s raised", what, hook_name(hook), exc_info=exc)
            raise HookFailed(f"{what} hook {hook_name(hook)} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
