"""The worker pool's one lifecycle state, and the events that wake whoever waits for a stop."""

from __future__ import annotations

import asyncio
import enum


class State(enum.Enum):
    """Where a pool is in its life; ``Lifecycle.state`` is the one answer."""

    STARTING = "starting"  # made, run() not called yet
    RUNNING = "running"
    PAUSED = "paused"  # running with its queue paused (jobq pause): nothing starts or comes in
    DRAINING = "draining"  # stopping: nothing comes in, the unstarted go back, running jobs end
    FORCED = "forced"  # a second stop: stopping at once, running jobs left unsettled
    STOPPED = "stopped"  # run() is ending: it cancels its workers, whose end is not a death


_LEFT = (State.FORCED, State.STOPPED)  # the workers' end is run()'s doing, not a death


class Lifecycle:
    """A pool's state, moved only by ``start``, ``stop``, ``drain``, ``close`` and the pause
    watch (``pause_changed``).

    ``stopping`` is set once a stop is asked (or the fetcher ran out of work), ``forcing`` at
    a second stop: the events wake waiters, the state says what is true. The pause watch's
    last word is kept beside the state, since a stop does not end a pause: while stopping,
    ``paused`` still says what the watch said.
    """

    def __init__(self) -> None:
        self._phase = State.STARTING  # never PAUSED: that is RUNNING with the watch's word
        self._paused = False  # what the pause watch last said
        self.stopping = asyncio.Event()
        self.forcing = asyncio.Event()
        # A worker may start the job it took: not paused, not stopping. Kept as a plain value,
        # moved with the state, since every worker reads it once per job.
        self.may_start = True

    @property
    def state(self) -> State:
        """The pool's state now."""
        if self._phase is State.RUNNING and self._paused:
            return State.PAUSED
        return self._phase

    @property
    def stopped(self) -> bool:
        """A stop was asked (the first or a second), or the fetcher ran out of work."""
        return self.stopping.is_set()

    @property
    def forced(self) -> bool:
        """A second stop asked to stop at once."""
        return self._phase is State.FORCED

    @property
    def left(self) -> bool:
        """Forced or stopped: a worker's end is the pool's doing, not a death to replace."""
        return self._phase in _LEFT

    @property
    def paused(self) -> bool:
        """The queue is paused, as the pause watch last said (a stop does not change that)."""
        return self._paused

    @property
    def holds_back(self) -> bool:
        """Nothing may start: the queue is paused, or the pool is stopping."""
        return self._paused or self.stopping.is_set()

    def start(self) -> None:
        """run() began (a stop asked before it stands)."""
        if self._phase is State.STARTING:
            self._phase = State.RUNNING

    def stop(self) -> bool:
        """A stop signal: the first drains, a second forces; True if this one forces."""
        again = self.stopping.is_set()
        if again:
            self._phase = State.FORCED
            self.forcing.set()
        elif self._phase in (State.STARTING, State.RUNNING):
            self._phase = State.DRAINING
        self.stopping.set()
        self.may_start = False
        return again

    def drain(self) -> None:
        """The fetcher ended (a stop, ``--once`` done, or its crash): drain what is held."""
        if self._phase in (State.STARTING, State.RUNNING):
            self._phase = State.DRAINING
        self.stopping.set()
        self.may_start = False

    def close(self) -> None:
        """run() is ending and cancels its workers (a forced stop stays forced)."""
        if self._phase is not State.FORCED:
            self._phase = State.STOPPED
        self.may_start = False

    def pause_changed(self, paused: bool) -> None:
        """The pause watch's word changed."""
        self._paused = paused
        self.may_start = not paused and not self.stopping.is_set()
