"""Job control on PostgreSQL: ``jobq jobs show|list|cancel|retry`` (docs/architecture.md,
"Job control"). The statements are queries.sql's job_show ... run_now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from jobq.core.attempts import history
from jobq.core.errors import ConfigError, NoSuchJob, TransportError
from jobq.core.port import JOB_STATES, JobInfo
from jobq.transports.common import shown_payload
from jobq.transports.postgres.connect import Fetch

MAX_ID = 2**63 - 1  # a bigint's largest
LOCK_WAIT = "2s"  # a cancel waits this long for a pending job's row held by someone else


def job_id(text: str) -> int:
    """A job id as the table's integer; ConfigError (key ``--id``) for one that is not. Ids
    at or below zero are ids too: another writer can insert them (OVERRIDING SYSTEM VALUE)."""
    digits = text[1:] if text.startswith("-") else text
    if (not (digits.isascii() and digits.isdigit()) or len(digits) > 19
            or not -MAX_ID - 1 <= int(text) <= MAX_ID):
        raise ConfigError(f"not a job id: {text!r} (ids are integers on PostgreSQL)", key="--id")
    return int(text)


def _info(row: Sequence[Any]) -> JobInfo:
    (ident, kind, state, payload, headers, attempts, max_attempts, error, created, run_at,
     finished, worker, key, cancel_requested) = row[:14]
    return JobInfo(id=ident, kind=kind, state=state, payload=shown_payload(payload),
                   headers=shown_payload(headers), attempts=attempts, max_attempts=max_attempts,
                   last_error=error, created_at=created, run_at=run_at, finished_at=finished,
                   worker=worker, key=key, cancel_requested=bool(cancel_requested),
                   errors=tuple(history(row[14])) if len(row) > 14 else ())


class JobControl:
    """Find and steer single jobs of one queue; ``fetch`` runs the operator's statements."""

    def __init__(self, fetch: Fetch, *, queue: str, channel: str,
                 requeue_dead: Any) -> None:
        self._fetch = fetch
        self._queue = queue
        self._channel = channel  # the wake-up NOTIFY channel (queries.channel)
        self._requeue_dead = requeue_dead  # PostgresAdmin.dead_requeue

    async def show(self, text: str) -> JobInfo:
        """The job with this id in the queue; NoSuchJob when there is none."""
        rows = await self._fetch("job_show", {"queue": self._queue, "id": job_id(text)})
        if not rows:
            raise NoSuchJob(f"no job {text} in queue {self._queue!r}")
        return _info(rows[0])

    async def list(self, state: str, kind: str | None, limit: int) -> list[JobInfo]:
        """Jobs in ``state``: pending in hand-out order, running by id, finished newest first."""
        if state not in JOB_STATES:
            raise ConfigError(f"no job state {state!r}: one of {', '.join(JOB_STATES)}",
                              key="--state")
        params = {"queue": self._queue, "kind": kind, "limit": limit, "status": state}
        name = {"pending": "jobs_pending", "running": "jobs_running"}.get(state, "jobs_finished")
        return [_info(row) for row in await self._fetch(name, params)]

    async def cancel(self, text: str) -> str:
        """Cancel a pending job in place, or ask a running one's consumer to stop it."""
        job = await self.show(text)
        self._refuse_ended(job, "cancel")
        params = {"queue": self._queue, "id": job.id}
        # Whatever show said: a pending row held for an instant (a claim, a relay batch, a
        # probe) looks running to the probe. Held past LOCK_WAIT, it is running.
        try:
            if await self._fetch("cancel_pending", {**params, "lock_wait": LOCK_WAIT}):
                return f"job {job.id} cancelled: it was pending and will not run"
        except TransportError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                raise
        await self._fetch("cancels_stale", {"queue": self._queue})
        if await self._fetch("cancel_request", params):
            return (f"job {job.id} is running ({job.worker or 'transaction mode'}): its consumer "
                    "was asked to stop it, "
                    "within about a second; it then ends cancelled, never retried "
                    "(`jobq jobs show` tells)")
        job = await self.show(text)  # it ended meanwhile, or was asked to stop already
        if job.cancel_requested:
            return f"job {job.id} is running and was asked to stop already"
        self._refuse_ended(job, "cancel")
        return f"job {job.id} is {job.state}"  # not reached: ended or asked covers it

    async def retry(self, text: str) -> str:
        """A dead job back to pending with fresh attempts, or a delayed one due now."""
        job = await self.show(text)
        if job.state == "dead":
            await self._requeue_dead(ids=[str(job.id)])
            return f"job {job.id} requeued: it was dead, it runs now with a fresh set of attempts"
        if job.state == "pending" and await self._fetch(
                "run_now", {"queue": self._queue, "id": job.id, "channel": self._channel}):
            return f"job {job.id} is due now (it was delayed; attempts kept: {job.attempts})"
        raise ConfigError(f"job {job.id} is {job.state}"
                          + (" and due already" if job.state == "pending" else "")
                          + ": only a dead or a delayed job can be retried now", key="--id")

    @staticmethod
    def _refuse_ended(job: JobInfo, verb: str) -> None:
        if job.state in ("pending", "running"):
            return
        hint = "; `jobq dead purge --id` deletes it" if job.state == "dead" else ""
        raise ConfigError(f"job {job.id} is {job.state} already: nothing to {verb}{hint}",
                          key="--id")
