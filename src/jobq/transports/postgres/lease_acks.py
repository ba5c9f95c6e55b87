"""A lease-mode consumer's acks, batched: queued, and written by one statement every
``ack_interval`` or every ``ack_batch`` acks, fenced to their claims (``held.py``).

A flush that fails or is cancelled keeps its acks for the next try and re-arms the flusher:
acking twice is harmless, and the lease keeps the jobs this consumer's meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from jobq.core.errors import TransportError
from jobq.transports.postgres.held import Lease, pairs
from jobq.transports.postgres.lease_run import Statements
from jobq.transports.postgres.lease_state import LeaseState


class Acks:
    """The acks waiting for their flush, and the flusher's steps."""

    def __init__(self, statements: Statements, state: LeaseState, *, interval: float,
                 batch: int, logger: logging.Logger) -> None:
        self._statements = statements
        self._state = state
        self._interval = interval
        self._batch = batch
        self._log = logger
        self.waiting: list[Lease] = []
        self._armed = asyncio.Event()  # acks wait for the flusher

    async def add(self, lease: Lease) -> None:
        """Queue the ack for the next batched flush (at most ``ack_interval`` later)."""
        held = self._state.held
        if not held.holds(lease):
            self._state.stale_outcomes("ack", 1, self._log)
            return
        self.waiting.append(lease)
        if len(self.waiting) >= self._batch:
            # A failed flush keeps its ids and re-arms the flusher, which retries with backoff:
            # the ack is not lost, so it must not be reported to the pool as a failed settle.
            with contextlib.suppress(TransportError):
                await self.flush()
        else:
            self._armed.set()

    async def flush_once(self) -> None:
        """The flusher's step: once acks wait, ``ack_interval`` later, flush them."""
        await self._armed.wait()
        await asyncio.sleep(self._interval)
        self._armed.clear()
        await self.flush()

    async def flush(self) -> None:
        """Write the acks waiting, in one statement."""
        if not self.waiting:
            return
        held = self._state.held
        leases, self.waiting = self.waiting, []
        held.flushing.append(leases)
        try:
            rows = await self._statements.run("ack", pairs(leases), fetch=True)
        except BaseException:
            # Failed or cancelled mid-statement (close() cancels the flush loop): keep them for
            # the next try. Acking twice is harmless; the lease keeps them ours meanwhile.
            # Re-arm the flusher: without it the retry would wait for some later ack, which an
            # idle consumer never gets, and these jobs would stay 'running' for good.
            self.waiting[:0] = leases
            held.unsure.update(leases)
            self._armed.set()
            raise
        finally:
            held.flushing.remove(leases)
        self._state.let_go(leases)
        if len(rows) < len(leases):  # not all still ours, or acked by a flush that failed late
            stale = set(leases).difference(map(tuple, rows)).difference(held.unsure)
            if stale:
                self._state.stale_outcomes("ack", len(stale), self._log)
        if held.unsure:
            held.unsure.difference_update(leases)
