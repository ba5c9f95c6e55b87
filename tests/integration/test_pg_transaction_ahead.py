"""Transaction mode with postgres.pick_ahead: one pick serves the next few workers to free up,
and a job picked ahead that no worker asks for soon is handed back with its start uncounted.
Off, a pick picks only for the free workers.

Before, workers freed up one at a time once a drain was under way, so each pick took a single
job: a statement and a commit per job on top of the job's own transaction.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from psycopg import sql

from jobq import Job
from jobq.config import load_settings
from jobq.core.job import Ack, Release
from jobq.core.within import within
from jobq.transports.postgres.connect import open_pool
from jobq.transports.postgres.transaction import PgTransactionTransport
from jobq.transports.postgres.txn_schedule import SPARE_FOR
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from tests.conftest import ROOT, fetch, until
from tests.integration.test_pg_transaction_faults import (
    deferred_children,
    fifth_commits_fail,
    fifth_commits_failed,
)
from tests.integration.test_postgres import jobs, produce, status_counts

pytestmark = pytest.mark.integration
WORKERS = 8
CLAIMS_WITHIN = 10.0  # seconds the claim tasks under way get to end (a round trip or three each)


async def transaction_transport(schema: str, queue: str, *, pick_ahead: bool = True
                                ) -> tuple[PgTransactionTransport, Any]:
    settings = load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.schema": schema, "postgres.claim": "transaction",
        "consumer.concurrency": WORKERS, "postgres.pick_ahead": pick_ahead})
    pool = await open_pool(settings.postgres.dsn, settings.connect, WORKERS + 2,
                           logging.getLogger("test"), network_timeout=settings.postgres.network_deadline,
                           min_size=2)
    transport = PgTransactionTransport(pool, settings.postgres, settings.connect, queue=queue,
                                       concurrency=WORKERS, once=True)
    return transport, pool


def test_a_drain_picks_several_jobs_per_pick(pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 600)
    picked: list[int] = []

    async def drain() -> int:
        transport, pool = await transaction_transport(schema, queue_name)
        real = transport._schedule._claim.pick

        async def counted(*args: Any) -> list[Any]:
            rows = await real(*args)
            picked.append(len(rows))
            return rows

        transport._schedule._claim.pick = counted  # type: ignore[method-assign]

        async def handler(job: Job) -> None:
            pass

        try:
            await transport.open()
            stats = await WorkerPool(transport, handler, RetryPolicy(), concurrency=WORKERS,
                                     buffer_size=0, job_timeout=5.0, shutdown_timeout=5.0,
                                     once=True).run()
            await transport.close()
        finally:
            await pool.close()
        return stats.ok

    assert asyncio.run(drain()) == 600
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 600}
    assert fetch(pg_dsn, sql.SQL("SELECT max(attempts) FROM {}").format(jobs(schema))) == [(1,)]
    assert sum(picked) == 600 and len(picked) < 600 / 3, picked  # before: about one per job


@pytest.mark.parametrize(("pick_ahead", "abandoned"), [(True, False), (False, False),
                                                       (True, True)])
def test_jobs_picked_ahead_and_not_asked_for_are_handed_back_uncounted(
        pg_dsn: str, schema: str, queue_name: str, pick_ahead: bool, abandoned: bool) -> None:
    produce(schema, queue_name, 3000)
    if abandoned:  # as a consumer that died holding them leaves them: their picks count them
        fetch(pg_dsn, sql.SQL("UPDATE {} SET locked_until = now() - interval '1 second', "
                              "locked_by = 'gone:1:x' RETURNING 1").format(jobs(schema)))

    async def busy_then_idle() -> tuple[int, int]:
        transport, pool = await transaction_transport(schema, queue_name, pick_ahead=pick_ahead)
        try:
            await transport.open()
            loop = asyncio.get_running_loop()
            until, most = loop.time() + 0.6, 0
            while loop.time() < until:  # eight workers settling as fast as jobs come
                for delivery in await transport.receive(WORKERS, 1.0):
                    await transport.settle(delivery, Ack())
                most = max(most, len(transport._schedule.spares))
            await asyncio.sleep(SPARE_FOR + 0.5)  # then nobody asks for more
            left = len(transport._schedule.spares)
            await transport.close()
        finally:
            await pool.close()
        return most, left

    most, left = asyncio.run(busy_then_idle())
    assert left == 0 and (most > 0) is pick_ahead  # it picked ahead (if on), and handed it back
    counts = status_counts(pg_dsn, schema, queue_name)
    assert set(counts) == {"done", "pending"} and sum(counts.values()) == 3000
    pending = fetch(pg_dsn, sql.SQL("SELECT attempts, locked_until FROM {} WHERE status = 'pending'")
                    .format(jobs(schema)))
    assert {attempts for attempts, _ in pending} == {0}  # none charged
    # Handed back: free at once (an abandoned one never reached keeps the mark it came with).
    assert abandoned or {until for _, until in pending} == {None}
    done = fetch(pg_dsn, sql.SQL("SELECT DISTINCT attempts FROM {} WHERE status = 'done'")
                 .format(jobs(schema)))
    assert done == [(1,)]  # counted once, by the pick or by the take


async def drain_counting_takes(schema: str, queue: str, handler: Any) -> tuple[Any, list[str]]:
    """A --once drain by a WorkerPool; how each take went: "alone" (a round trip of its own),
    "chained" (with an ack's COMMIT), "commit failed" or "take failed" (after its COMMIT)."""
    transport, pool = await transaction_transport(schema, queue)
    takes: list[str] = []
    real = transport._schedule._claim.take

    async def counted(conn: Any, row: Any, *, commit: bool = False) -> bool:
        try:
            taken = await real(conn, row, commit=commit)
        except Exception:
            takes.append("commit failed" if conn.info.transaction_status.name == "IDLE"
                         else "take failed")
            raise
        takes.append("chained" if commit else "alone")
        return taken

    transport._schedule._claim.take = counted  # type: ignore[method-assign]
    try:
        await transport.open()
        stats = await WorkerPool(transport, handler, RetryPolicy(base_delay=60.0, jitter=False),
                                 concurrency=WORKERS, buffer_size=0, job_timeout=5.0,
                                 shutdown_timeout=5.0, once=True).run()
        await transport.close()
    finally:
        await pool.close()
    return stats, takes


def test_an_ack_takes_the_next_job_picked_ahead_in_its_commits_round_trip(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 600)

    async def handler(job: Job) -> None:
        await asyncio.sleep(0.001)

    stats, takes = asyncio.run(drain_counting_takes(schema, queue_name, handler))
    assert stats.ok == 600
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 600}
    assert fetch(pg_dsn, sql.SQL("SELECT DISTINCT attempts FROM {}").format(jobs(schema))) == [(1,)]
    # Before: every take a round trip of its own, after the ack's COMMIT had its own.
    assert takes.count("chained") > 600 / 4, takes.count("chained")  # 454 measured


def test_a_commit_that_fails_hands_the_job_taken_with_it_back_uncounted(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    children = deferred_children(pg_dsn, schema)
    produce(schema, queue_name, 600)
    stats, takes = asyncio.run(drain_counting_takes(schema, queue_name,
                                                    fifth_commits_fail(children)))
    assert stats.ok == 480
    assert "commit failed" in takes, takes  # a take went with a COMMIT that failed
    fifth_commits_failed(pg_dsn, schema, queue_name, children)


def test_a_take_whose_statement_went_missing_after_its_commit_prepares_it_again(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    produce(schema, queue_name, 3000)

    async def chain_after_deallocate() -> tuple[str, int, int, bool]:
        transport, pool = await transaction_transport(schema, queue_name)
        try:
            await transport.open()
            deliveries: list[Any] = []
            while not (transport._schedule.spares and deliveries):  # settling until jobs are picked ahead
                for delivery in deliveries:
                    await transport.settle(delivery, Ack())
                deliveries = await transport.receive(WORKERS, 1.0)
            last, *others = deliveries
            # As the next server connection behind a pooler would be (and not transactional).
            await last.job.context.execute("DEALLOCATE ALL")
            assert transport._schedule.spares  # so its ack takes one with its COMMIT
            await transport.settle(last, Ack())
            chained = [d for d in transport._state.ready if d.handle.conn is last.handle.conn]
            misses = transport._schedule._claim._misses
            for delivery in others:
                await transport.settle(delivery, Ack())
            while transport._state.ready:  # the job taken with the COMMIT, and any other
                for delivery in await transport.receive(WORKERS, 1.0):
                    await transport.settle(delivery, Ack())
            await transport.close()
        finally:
            await pool.close()
        return last.job.id, misses, len(chained), transport._schedule._claim.chains

    job_id, misses, chained, chains = asyncio.run(chain_after_deallocate())
    assert (misses, chained, chains) == (1, 1, True)  # prepared again; still chaining
    assert fetch(pg_dsn, sql.SQL("SELECT status, attempts FROM {} WHERE id = %s")
                 .format(jobs(schema)), (int(job_id),)) == [("done", 1)]  # its COMMIT held
    counts = status_counts(pg_dsn, schema, queue_name)
    assert set(counts) <= {"done", "pending"} and sum(counts.values()) == 3000
    rows = fetch(pg_dsn, sql.SQL("SELECT DISTINCT status, attempts FROM {}").format(jobs(schema)))
    assert set(rows) <= {("done", 1), ("pending", 0)}, rows



def pending_free(dsn: str, schema: str) -> list[tuple[object, ...]]:
    """(status, attempts, picked) of every job, by id."""
    return fetch(dsn, sql.SQL("SELECT status, attempts, locked_until IS NOT NULL FROM {} "
                              "ORDER BY id").format(jobs(schema)))


@pytest.mark.parametrize("answered_after", [False, True])
def test_a_pick_while_jobs_are_handed_back_does_not_end_a_once_drain_without_them(
        pg_dsn: str, schema: str, queue_name: str, answered_after: bool) -> None:
    """A pick that runs while a hand-back waits for its COMMIT finds the jobs still picked and
    nothing else: the drain must still see them once they are free. Before, the hand-back
    cleared "nothing left" before its COMMIT, the pick set it again, and the --once receive
    that followed returned nothing with three jobs due. ``answered_after``: the pick's answer
    comes back only after the hand-back is over (its look at the table came before), which a
    review found the first fix missed."""
    produce(schema, queue_name, 3)

    async def hand_back_beside_a_pick() -> tuple[bool, int]:
        transport, pool = await transaction_transport(schema, queue_name, pick_ahead=False)
        try:
            await transport.open()
            async with pool.connection() as conn:  # picked by this consumer, as a take left them
                rows = await transport._schedule._claim.pick(conn, transport._state.sweep, queue_name, 3)
            ids = [int(row[0]) for row in rows]
            transport._schedule._hold.picked.update((job_id, False) for job_id in ids)
            real, picked_meanwhile = transport._schedule._hold.unpick, asyncio.Event()

            async def late_unpick(job_ids: list[int]) -> None:
                await picked_meanwhile.wait()  # the hand-back's COMMIT comes after the pick
                await real(job_ids)

            transport._schedule._hold.unpick = late_unpick  # type: ignore[method-assign]
            hand_back = asyncio.create_task(transport._schedule._hold.untake(ids, "a failed take"))
            real_pick = transport._schedule._claim.pick

            async def pick_answered_after(*args: Any) -> list[Any]:
                rows = await real_pick(*args)
                picked_meanwhile.set()
                await hand_back  # the answer reaches the consumer after the hand-back
                return rows

            if answered_after:
                transport._schedule._claim.pick = pick_answered_after  # type: ignore[method-assign]
            await asyncio.sleep(0)
            transport._schedule.picking += 1  # as _spawn_pick counts it
            assert await transport._schedule.pick(1) is None  # they are still picked: nothing found
            transport._schedule._claim.pick = real_pick  # type: ignore[method-assign]
            picked_meanwhile.set()
            await hand_back
            dry = transport._state.dry
            transport._schedule.width = WORKERS  # as a drain under way asks (the empty pick reset it)
            deliveries: list[Any] = []  # the --once drain's next asks, until one finds nothing
            while got := await transport.receive(WORKERS, 0.0):
                deliveries += got
            for delivery in deliveries:
                await transport.settle(delivery, Release())
            await transport.close()
        finally:
            await pool.close()
        return dry, len(deliveries)

    assert asyncio.run(hand_back_beside_a_pick()) == (False, 3)
    assert pending_free(pg_dsn, schema) == [("pending", 0, False)] * 3


def test_a_take_that_ends_after_a_pause_began_hands_its_job_back(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """The pool pauses the transport right after a receive returns; the takes of that receive's
    pick still under way must not hold their jobs (row lock, open transaction) through the
    pause. Before, they landed among the jobs ready for a receive that never came."""
    produce(schema, queue_name, 3)

    async def pause_beside_takes() -> tuple[int, int, list[tuple[object, ...]]]:
        transport, pool = await transaction_transport(schema, queue_name, pick_ahead=False)
        real, gate, calls = transport._schedule._claim.take, asyncio.Event(), 0

        async def gated(conn: Any, row: Any, **kwargs: Any) -> bool:
            nonlocal calls
            calls += 1
            if calls > 1:  # the pick's first job is taken at once, the others wait
                await gate.wait()
            return await real(conn, row, **kwargs)

        transport._schedule._claim.take = gated  # type: ignore[method-assign]
        try:
            await transport.open()
            transport._schedule.width = WORKERS  # a pick for every free worker, as in a busy drain
            handed = await transport.receive(WORKERS, 1.0)
            await transport.quiesce()  # as WorkerPool._hold does next
            gate.set()
            # Until no claim task is left: a take that ends now, paused, spawns its put-back
            # as a claim task of its own (ClaimTasks.hand_over), after the takes waited for here began;
            # waiting only for the takes read the rows while a put-back was still under way.
            # Within a deadline: a claim that never ends fails the test, it does not hang it.
            async with asyncio.timeout(CLAIMS_WITHIN):
                while transport._claims.claiming:
                    await asyncio.wait(set(transport._claims.claiming))
            ready = len(transport._state.ready)
            during = await asyncio.to_thread(pending_free, pg_dsn, schema)
            for delivery in handed:
                await transport.settle(delivery, Release())
        finally:
            # Even after a failure: close() rolls back what is still held, without which the
            # schema's DROP at teardown waits for ever on the row locks of this dead loop.
            await transport.close()
            await pool.close()
        return len(handed), ready, during

    handed, ready, during = asyncio.run(pause_beside_takes())
    assert (handed, ready) == (1, 0)
    # The job handed out keeps its pick's mark (its take, uncommitted, is not seen); the two
    # others are free for any consumer, unstarted, during the pause.
    assert sorted(during) == [("pending", 0, False)] * 2 + [("pending", 0, True)]
    assert pending_free(pg_dsn, schema) == [("pending", 0, False)] * 3


def test_a_graceful_stop_hands_back_what_was_picked_ahead_while_the_running_finish(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    """SIGTERM's drain waits for the running jobs; the acks of those that finish meanwhile
    must not take more jobs with their COMMITs, nor keep those picked ahead, for a receive
    that will not come. Before, each such ack took a job picked ahead and held it, locked and
    unstarted, until the consumer closed (7 of 8 workers' worth here)."""
    produce(schema, queue_name, 2000)

    async def stop_beside_a_long_job() -> tuple[int, int, int, int]:
        transport, pool = await transaction_transport(schema, queue_name)
        long_started, long_ends, quiesced = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def handler(job: Job) -> None:
            if not long_started.is_set():
                long_started.set()
                await long_ends.wait()  # still running through the checks below
            else:
                await asyncio.sleep(0.002)

        real_quiesce = transport.quiesce

        async def quiesce() -> None:  # the pool's hand-back at the stop, seen to its end
            await real_quiesce()
            quiesced.set()

        transport.quiesce = quiesce  # type: ignore[method-assign]
        try:
            await transport.open()
            workers = WorkerPool(transport, handler, RetryPolicy(), concurrency=WORKERS,
                                 buffer_size=0, job_timeout=30.0, shutdown_timeout=30.0)
            running = asyncio.create_task(workers.run())
            await long_started.wait()
            await until(lambda: transport._schedule.spares, "a drain under way picking ahead", 10)
            ahead = len(transport._schedule.spares)
            workers.stop()
            await within(quiesced.wait(), 10)
            # The short jobs settled, and what their acks or the claims under way took since
            # the hand-back is back too; the long job still runs.
            await until(lambda: workers.in_flight == 1 and not transport._claims.claiming,
                        "the short jobs' settles and the claims under way", 10)
            held = (len(transport._state.ready) + len(transport._schedule.spares),
                    len(transport._schedule._hold.held))
            long_ends.set()
            stats = await running
            await transport.close()
        finally:
            await pool.close()
        return ahead, *held, stats.ok

    ahead, waiting, connections, ok = asyncio.run(stop_beside_a_long_job())
    assert ahead > 0  # the drain picked ahead before the stop
    assert (waiting, connections) == (0, 1)  # only the long job's transaction still open
    counts = status_counts(pg_dsn, schema, queue_name)
    assert counts == {"done": ok, "pending": 2000 - ok}
    rows = fetch(pg_dsn, sql.SQL("SELECT status, attempts, locked_until IS NULL FROM {} "
                                 "GROUP BY 1, 2, 3").format(jobs(schema)))
    assert sorted(rows) == [("done", 1, False), ("pending", 0, True)]  # none charged, all free
