"""A lease-mode consumer's claims, as deliveries: up to the pool's ask in one statement that commits at once.

A claim marks its rows ``running`` with a lease and the claim's token (``held.py``); it starts
from the cursor or from the start of the queue (cursor.py says which), and one from the cursor
that finds nothing is made again from the start at once. A claim cancelled while in flight
(shutdown) may still commit: its rows are handed straight back, attempts not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from typing import Any

from jobq.config import LimitsConfig
from jobq.core.job import Delivery
from jobq.transports.postgres.cursor import ClaimCursor, Key
from jobq.transports.postgres.decode import row_to_delivery, spent
from jobq.transports.postgres.held import pairs
from jobq.transports.postgres.lease_run import Statements
from jobq.transports.postgres.lease_state import LeaseState

USED = 10  # claim's row: the job's attempts before this claim counted one


class Claimer:
    """Claims jobs for one lease-mode consumer, each claim with a token of its own."""

    def __init__(self, statements: Statements, state: LeaseState, *, worker: str, queue: str,
                 lease: float, channel: str, limits: LimitsConfig) -> None:
        self._statements = statements
        self._state = state
        self._worker = worker
        self._queue = queue
        self._lease = lease
        self._channel = channel
        self._limits = limits
        self._claims = itertools.count(1)  # numbers this consumer's claims: their tokens
        self._cursor = ClaimCursor()  # where the next claim starts (cursor.py)

    async def deliveries(self, limit: int) -> list[Delivery]:
        """Up to ``limit`` jobs claimed, as deliveries whose handle is their lease."""
        token, rows = await self._claim(limit)
        deliveries = [row_to_delivery(row, self._queue, self._limits) for row in rows]
        lapsed = self._state.lapsed
        for delivery, row in zip(deliveries, rows, strict=True):
            delivery.handle = (row[0], token)
            delivery.lapsed = lapsed
            if delivery.isolate:  # rescued: its consumer died or stalled holding it
                delivery.job = dataclasses.replace(delivery.job, redelivered=True)
            if delivery.malformed is None:
                delivery.fact = spent(row[USED], row[5])
        return deliveries

    async def _claim(self, limit: int) -> tuple[str, list[Any]]:
        """Claim from the cursor, or from the start of the queue (cursor.py says which); a
        claim from the cursor that finds nothing is made again from the start at once."""
        after = self._cursor.start()
        token, rows = await self._claim_from(limit, after)
        self._moved(after, rows, limit)
        if rows or after is None:
            return token, rows
        token, rows = await self._claim_from(limit, None)
        self._moved(None, rows, limit)
        return token, rows

    def _moved(self, after: Key | None, rows: list[Any], limit: int) -> None:
        """Tell the cursor what a claim took; an isolated job claimed alone (the "lone" CTE)
        or jobs with a priority (the "urgent" CTE, taken from the start whatever the cursor)
        say nothing of where the queue stands and leave it as it was."""
        if rows and (rows[0][9] or (len(rows) == 1 and rows[0][7] is True)):
            return
        self._cursor.claimed(after, ((row[8], row[0]) for row in rows), limit)

    async def _claim_from(self, limit: int, after: Key | None) -> tuple[str, list[Any]]:
        token = f"{self._worker}/{next(self._claims)}"
        params = {"queue": self._queue, "limit": limit, "lease": self._lease, "token": token,
                  "lone": self._state.may_claim_suspect()}
        if after is not None:
            params.update(after_run_at=after[0], after_id=after[1])
        name = "claim" if after is None else "claim_after"
        sent = time.monotonic()
        claim = asyncio.ensure_future(self._statements.run(name, params, fetch=True))
        try:
            rows = await asyncio.shield(claim)
        except asyncio.CancelledError:
            # Cancelled (shutdown) while the claim was in flight: it may still commit, so wait
            # for it and hand its rows straight back, attempt not counted.
            with contextlib.suppress(Exception):
                taken = await claim
                if taken:
                    await self._statements.run("release", {
                        **pairs([(row[0], token) for row in taken]), "channel": self._channel})
            raise
        self._state.held.claimed(token, (row[0] for row in rows), sent)
        if len(rows) == 1 and rows[0][7] is True:  # the "lone" CTE's: a suspect
            self._state.suspect = (rows[0][0], token)
        return token, rows
