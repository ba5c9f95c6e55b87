"""The worker pool's time bounds, in seconds (the backstop adds up the shutdown's)."""

from __future__ import annotations

from jobq.core.backoff import Backoff

# At shutdown, how long handing back the unstarted may take (at most shutdown_timeout).
RELEASE_TIMEOUT = 10.0
STALL_MARGIN = 60.0  # default stall_timeout: job_timeout plus this (a job ends by then or is cut)
# Capped low: once the server is back, an idle pool should notice within seconds.
RECEIVE_BACKOFF = Backoff(base=0.4, cap=5.0)
INTERRUPT_GRACE = 10.0  # seconds interrupted jobs get to settle after the shutdown deadline
# A consumer of a jobq.App: how long its async failure hooks still running and then its
# shutdown hooks may take, once the pool has stopped (then abandoned, logged).
APP_HOOKS_BOUND = 10.0
