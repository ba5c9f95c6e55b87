"""A transaction-mode consumer's claim scheduler: picks and takes only for free worker slots.

A pick takes the next jobs past the sweep's cursor, one per free worker that no claim in flight
is already for, in a statement that commits at once (txn_pick); the first is taken in the
pick's task, the others in tasks of their own (txn_take.py). After a pick found nothing, picks
ask for one job, doubling as they find as many as they asked for: a queue that is idle, or fed
a job at a time, costs about one pick per job. With ``postgres.pick_ahead``, a pick also picks
the jobs the next workers to free up will want, as many as were taken in SPARES_HOLD seconds
lately; they wait in a timed buffer (timed.py) whose one owner is this scheduler: an ack takes
the oldest with its COMMIT, a receive takes them first, and one not asked for within SPARE_FOR
is handed back, well before its pick's moment (GRACE) lets other picks take it.
"""

from __future__ import annotations

import asyncio
import contextlib

from psycopg_pool import AsyncConnectionPool

from jobq.core.errors import TransportError
from jobq.core.job import Delivery
from jobq.transports.postgres.claims import GRACE, STALE, ClaimStatement, Conn, Row
from jobq.transports.postgres.connect import live, translated
from jobq.transports.postgres.timed import TimedBuffer
from jobq.transports.postgres.txn_hold import Holdings
from jobq.transports.postgres.txn_state import TxnState
from jobq.transports.postgres.txn_take import Taker
from jobq.transports.postgres.txn_tasks import ClaimTasks
from jobq.worker.sizing import BufferSizer

SPARES_HOLD = 0.25
SPARE_FOR = GRACE / 4


class Scheduler:
    """Starts the picks and takes for the free worker slots; owns the jobs picked ahead."""

    def __init__(self, pool: AsyncConnectionPool[Conn], claim: ClaimStatement, *,
                 state: TxnState, hold: Holdings, tasks: ClaimTasks, taker: Taker, queue: str,
                 concurrency: int, pick_ahead: bool) -> None:
        self._pool = pool
        self._claim = claim
        self._state = state
        self._hold = hold
        self._tasks = tasks
        self._taker = taker
        self._queue = queue
        self._pick_ahead = pick_ahead
        # Picked ahead for workers not yet free, oldest first.
        self.spares: TimedBuffer[Row] = TimedBuffer(SPARE_FOR, self._stale)
        self._sizer = BufferSizer(0, concurrency, hold=SPARES_HOLD)
        self.picking = 0  # picks under way
        self.asked = 0  # jobs the picks in flight may bring, beyond one per pick task
        self.width = 1  # jobs a pick asks for: 1 after one found nothing, doubled as they find

    def _stale(self, rows: list[Row]) -> None:
        """Jobs picked ahead more than SPARE_FOR ago: handed back (in a claim task, which a
        --once drain and close() wait for)."""
        self._tasks.hand_back(rows, "picked ahead, not asked for")

    def start_claims(self, max_count: int) -> None:
        """Takes of jobs picked ahead, then a pick, for the free workers that no claim in
        flight is already for."""
        state = self._state
        if state.error is not None:
            return
        room = (min(max_count, state.slots - len(state.out)) - self.asked
                - len(self._tasks) - len(state.ready))
        room = self._take_spares(room)
        if state.dry:
            return
        # A queue that is idle, or fed a job at a time, costs about one pick per job, not one
        # per free worker: after a pick found nothing, they ramp up as picks find jobs.
        room = min(room, self.width - self.asked)
        if room <= 0:
            return
        state.wake.clear()  # news from now on is news to the pick started here
        self.asked += room - 1  # the pick's task counts as one of them while it runs
        self._spawn_pick(room)

    def _spawn_pick(self, room: int) -> None:
        self.picking += 1  # from now: two acks in one loop turn must not both refill
        self._tasks.spawn(self.pick(room))

    def _take_spares(self, room: int) -> int:
        """Take up to ``room`` jobs picked ahead, in a task each; hand back the stale ones.
        The room left."""
        self.spares.expire()
        while room > 0 and self.spares:
            self._tasks.spawn(self._taker.take(None, self.spares.pop()))
            room -= 1
        return room

    def chained_spare(self) -> Row | None:
        """A job picked ahead for the worker an ack frees, to take with its COMMIT (or None)."""
        state = self._state
        self.spares.expire()
        free = (state.slots - len(state.out) + 1 - self.asked - len(self._tasks)
                - len(state.ready))
        if (not self.spares or free <= 0 or state.paused or state.closing
                or state.error is not None or not self._claim.chains):
            return None
        row = self.spares.pop()
        self._refill()
        return row

    def _refill(self) -> None:
        """Once the jobs picked ahead are down to half of what the picks would keep now, and
        no pick is under way, a pick for more (only ahead): the next acks then find one to
        take with their COMMIT, not an empty buffer and a pick of their own."""
        if (self.picking or self._state.dry or 2 * len(self.spares) > self._sizer.size
                or not self._pick_ahead):
            return
        self.asked -= 1  # the pick's task brings no job for a free worker
        self._spawn_pick(0)

    def _ahead(self) -> int:
        """How many jobs a pick may pick ahead now (``postgres.pick_ahead``): the takes of
        SPARES_HOLD seconds at the recent rate, less those already picked ahead."""
        if not self._pick_ahead:
            return 0
        wanted = self._sizer.measure(asyncio.get_running_loop().time(), self._taker.takes)
        return max(0, wanted - len(self.spares))

    async def _picked(self, room: int) -> tuple[Conn | None, list[Row]]:
        """The connection and rows of a pick of up to ``room`` jobs and those picked ahead."""
        ahead = self._ahead()
        try:
            if not room + ahead:
                return None, []
            with translated("postgres claim"):
                conn = await live(self._pool)
            self._hold.held.add(conn)
            try:
                sweep = self._state.sweep  # a new sweep may begin while this pick runs
                with translated("postgres claim"):
                    rows = await self._claim.pick(conn, sweep, self._queue, room + ahead)
            except BaseException:
                await self._hold.give_back(conn)
                raise
        finally:
            self.asked -= room - 1
            self.picking -= 1
        if not rows:
            if sweep is self._state.sweep:  # a sweep begun since (a hand-back, a NOTIFY) is not dry
                self._state.dry, self.width = True, 1
            await self._hold.give_back(conn)
            return None, []
        self._hold.picked.update((int(row[0]), bool(row[STALE])) for row in rows)
        for row in rows:
            sweep.passed(row)
        return conn, rows

    async def pick(self, room: int) -> Delivery | None:
        """Pick up to ``room`` jobs past the cursor; take the first here, the others in tasks.
        With ``room`` 0, a refill: only jobs picked ahead."""
        conn, rows = await self._picked(room)
        if conn is None:
            return None
        state = self._state
        # Jobs found abandoned (their pick counted their starts) go to free workers first (in
        # a refill, to the front of those picked ahead: the next ack takes them): a consumer
        # that died holding one picked ahead would have it charged unrun.
        rows.sort(key=lambda row: not row[STALE])
        rows, spares = rows[:room], rows[room:]
        if room:
            self.width = min(state.slots, self.width * 2) if len(rows) == room else len(rows)
        if spares and (state.paused or state.closing):  # since the pick began: none kept
            self._tasks.hand_back(spares, "picked ahead as a pause or a stop began")
        elif spares:
            self.spares.add(spares)
        if not rows:  # a refill
            await self._hold.give_back(conn)
            return None
        for row in rows[1:]:
            self._tasks.spawn(self._taker.take(None, row))
        return await self._taker.take(conn, rows[0])

    async def quiesce(self) -> None:
        """Paused: hand back the jobs taken and not handed out, then those picked ahead."""
        state = self._state
        # Each holds a row lock and an open transaction. Each leaves the ready ones once put
        # back, so that close() still finds it if a deadline cuts this short (the pool's, at
        # a stop).
        while state.ready:
            delivery = state.ready[0]
            await self._hold.put_back(delivery.handle)
            state.ready = [d for d in state.ready if d is not delivery]
        if self.spares:
            await self._tasks.handing_back(self.spares.clear(), "picked ahead, not asked for")

    async def close(self) -> None:
        """After the claim tasks: what is still held handed back (the jobs taken and never
        handed out, those picked, the connections of jobs a forced stop left running)."""
        state, hold = self._state, self._hold
        self.spares.clear()  # their jobs are among those picked, handed back below
        for delivery in state.ready:  # claimed but never handed out: the attempt does not count
            await hold.put_back(delivery.handle)
        state.ready.clear()
        for conn in list(hold.held):  # a forced stop left jobs running: roll them back
            await hold.give_back(conn)
        if hold.picked:  # picked, never taken: free them now rather than after the grace
            with contextlib.suppress(TransportError):
                await hold.unpick(list(hold.picked))
