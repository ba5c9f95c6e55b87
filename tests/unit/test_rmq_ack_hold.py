"""Acks held while a consumer is cancelled (a pause, a stop) go out once the hold ends.

Before the fix the ack loop slept through the hold and was woken only by the first
completion owed: those completed during the hold, and after it, waited for a completion
that a paused consumer never makes. Their deliveries stayed unacked, and a quorum queue
handed them out again when the consumer resumed (found by tests/contract/test_port.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.unit.test_rmq_session_loss import FakeRaw, session


class Recording(FakeRaw):
    def __init__(self) -> None:
        super().__init__()
        self.acked: list[tuple[int, bool]] = []

    async def basic_ack(self, tag: int, *_args: Any, multiple: bool = False, **_kw: Any) -> None:
        self.acked.append((tag, multiple))


async def test_acks_completed_during_a_hold_are_sent_when_it_ends() -> None:
    raw = Recording()
    channel = session(raw)  # ack_batch 4: none of these fills a batch
    try:
        channel.hold_acks()
        channel.complete(1)
        channel.complete(2)
        await asyncio.sleep(0.05)  # five ack intervals: nothing may go out while held
        assert raw.acked == []
        channel.send_acks()
        channel.complete(3)  # a release after the hold: no first completion to wake the loop
        deadline = time.monotonic() + 5.0
        while (3, True) not in raw.acked:
            assert time.monotonic() < deadline, f"acks not sent after the hold: {raw.acked}"
            await asyncio.sleep(0.005)
    finally:
        await channel.close()
