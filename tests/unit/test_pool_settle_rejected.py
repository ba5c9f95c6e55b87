"""The pool when an ack is rejected because the job failed after all (SettleRejected)."""

from __future__ import annotations

from jobq import Job
from jobq.core.errors import CommitFailed, SettleRejected
from jobq.core.job import Ack, Decision, Delivery, Outcome
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy


class RejectingTransport(MemoryTransport):
    """An ack that refuses every job, as a transaction-mode COMMIT that fails would."""

    async def settle(self, delivery: Delivery, decision: Decision) -> None:
        if isinstance(decision, Ack):
            raise SettleRejected(CommitFailed("ForeignKeyViolation: key (parent)=(7) is not present"))
        await super().settle(delivery, decision)


async def test_a_rejected_ack_is_settled_as_a_failure_by_the_policy() -> None:
    store = MemoryStore()
    job_id = store.add("k", {}, max_attempts=2)
    transport = RejectingTransport(store)
    outcomes: list[tuple[Outcome, str]] = []

    class Observer:
        def settled(self, decision: Decision, duration: float, error: BaseException | None,
                    job: Job) -> None:
            outcomes.append((decision.outcome, type(error).__name__))

        def gauges(self, in_flight: int, buffered: int) -> None:
            pass

    async def handler(job: Job) -> None:
        pass

    pool = WorkerPool(transport, handler, RetryPolicy(base_delay=0.0, jitter=False), concurrency=1,
                      buffer_size=0, job_timeout=5.0, shutdown_timeout=5.0, poll_timeout=0.05,
                      once=True, observer=Observer())
    stats = await pool.run()
    entry = store.entries[job_id]
    settles = [call for call, _ in transport.calls if call != "quiesce"]  # the stop quiesces
    assert settles == ["retry", "dead"]  # never left unsettled
    assert (entry.status, entry.attempts) == ("dead", 2)
    assert entry.last_error == ("CommitFailed: ForeignKeyViolation: key (parent)=(7) is not present"
                                " (gave up after 2 of 2 attempts)")
    assert outcomes == [(Outcome.RETRY, "CommitFailed"), (Outcome.DEAD, "CommitFailed")]
    assert (stats.ok, stats.retried, stats.dead, stats.settle_failures) == (0, 1, 1, 0)
