"""Lease-mode bookkeeping when a write to the server fails (no server: the statements are faked).

Regressions: a failed retry/dead-letter kept the job in the heartbeat set, so its lease was renewed
for as long as the consumer lived and the job never ended; a failed ack flush waited for a later
ack before trying again, which an idle consumer never gets.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobq.config import ConnectConfig, PostgresConfig
from jobq.core.errors import ConnectionLost, TransportError
from jobq.core.job import Ack, Dead, Delivery, Job, RetryIn
from jobq.transports.postgres.lease import PostgresTransport
from tests.conftest import until

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class FakeServer:
    """Stands in for lease_run.Statements.run: records statements, fails the ones it is told to."""

    def __init__(self, fail: dict[str, int]) -> None:
        self.fail = dict(fail)  # statement name -> how many times to fail it
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def run(self, name: str, params: dict[str, Any], *, fetch: bool = False) -> list[Any]:
        self.calls.append((name, params))
        if self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise ConnectionLost(f"postgres {name}: server closed the connection unexpectedly")
        if name in ("claim", "claim_after"):  # ..., isolate, run_at (the cursor's key),
            # priority, the attempts used before the claim
            return [(i, "k", {}, {}, 1, 5, None, False, EPOCH, 0, 0)
                    for i in range(1, params["limit"] + 1)]
        if name == "heartbeat":  # every lease still held, as the server answers
            return list(zip(split_ids(params["ids"]), params["tokens"].split(","), strict=True))
        return []

    def ids_of(self, name: str) -> list[list[int]]:
        return [split_ids(p["ids"]) if "ids" in p else [p["id"]] for n, p in self.calls if n == name]


def split_ids(ids: str) -> list[int]:
    """The ids of a fenced statement's parameters (comma-separated text, see held.pairs)."""
    return [int(i) for i in ids.split(",")] if ids else []


def transport(server: FakeServer, **settings: Any) -> PostgresTransport:
    cfg = PostgresConfig(notify=False, heartbeat=0.05, rescue_interval=0.05, ack_interval=0.01,
                         **settings)
    t = PostgresTransport(None, cfg, ConnectConfig(backoff_base=0.01, backoff_max=0.02),  # type: ignore[arg-type]
                          queue="q")
    t._statements.run = server.run  # type: ignore[method-assign]
    return t


def delivery(job_id: int) -> Delivery:
    return Delivery(job=Job(id=str(job_id), queue="q", kind="k", payload={}), handle=job_id)


@pytest.mark.parametrize("settle", ["retry", "dead"])
async def test_a_job_whose_settle_failed_is_no_longer_heartbeated(settle: str) -> None:
    server = FakeServer({settle: 1})
    t = transport(server)
    await t.open()
    try:
        got = await t.receive(2, 0.1)
        assert [d.handle[0] for d in got] == [1, 2]
        with pytest.raises(TransportError):
            if settle == "retry":
                await t.settle(got[0], RetryIn(1.0, "ValueError: boom"))
            else:
                await t.settle(got[0], Dead("PermanentError: no"))
        server.calls.clear()
        # The heartbeat still runs for the job we hold (every 0.05 s): two beats since.
        await until(lambda: len(server.ids_of("heartbeat")) >= 2, "two heartbeats", 10)
        beats = server.ids_of("heartbeat")
        # Job 1's lease is left to expire, so a rescue hands it out again; job 2 is still ours.
        assert all(ids == [2] for ids in beats), beats
    finally:
        await t.close()


async def test_a_failed_ack_flush_is_retried_without_waiting_for_another_ack() -> None:
    server = FakeServer({"ack": 2})
    t = transport(server)
    await t.open()
    try:
        (job,) = await t.receive(1, 0.1)
        await t.settle(job, Ack())
        # No further ack arrives (an idle consumer): the flusher tries again on its own.
        await until(lambda: len(server.ids_of("ack")) >= 3, "a third try of the ack", 10)
        assert server.ids_of("ack") == [[1], [1], [1]]  # failed twice, then written
        server.calls.clear()
        # Two turns of the upkeep since, each ending with a rescue (a fixed sleep could see
        # none on a loaded machine, and prove nothing).
        await until(lambda: [n for n, _ in server.calls].count("rescue") >= 2,
                    "two turns of the upkeep", 10)
        assert server.ids_of("heartbeat") == []  # acked: no longer held
    finally:
        await t.close()


async def test_a_full_ack_batch_that_fails_to_flush_is_not_reported_as_a_failed_settle() -> None:
    server = FakeServer({"ack": 1})
    t = transport(server, ack_batch=2)
    await t.open()
    try:
        jobs = await t.receive(2, 0.1)
        for job in jobs:
            await t.settle(job, Ack())  # the second one flushes inline, fails, and must not raise
        # The failed batch is tried again, whole.
        await until(lambda: len(server.ids_of("ack")) >= 2, "the batch tried again", 10)
        assert server.ids_of("ack")[:2] == [[1, 2], [1, 2]]
    finally:
        await t.close()
