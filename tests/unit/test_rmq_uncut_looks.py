"""A consumer's looks at queue depths on its consuming channel are never cut in the middle.

aiormq closes a channel whose RPC is cancelled half-way. The watcher of ``<q>.alone`` looks
with a passive declare on the consuming channel, and close() cancels the watcher: under load
the cancel landed mid-declare, the consuming channel closed, the basic.cancel that follows
failed, and the acks not yet sent were lost, so the broker delivered those jobs again (found
by tests/contract/test_port.py under CPU load). Now the caller's cancel ends only its wait.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from jobq.transports.rabbitmq.alone import AloneQueue


class SlowChannel:
    """A passive declare that answers when told; records whether it was cancelled."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()
        self.cut = False

    async def declare_queue(self, name: str, **_kw: Any) -> Any:
        self.asked.set()
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.cut = True
            raise
        return SimpleNamespace(declaration_result=SimpleNamespace(message_count=3))


async def test_a_cancelled_look_at_the_alone_queue_runs_to_its_end() -> None:
    channel = SlowChannel()
    looking = asyncio.ensure_future(AloneQueue("q.alone", 5.0).count(channel))
    await asyncio.wait_for(channel.asked.wait(), 5.0)
    looking.cancel()  # as close() cancels the watcher
    await asyncio.gather(looking, return_exceptions=True)
    assert looking.cancelled()  # the caller's wait ended at once
    channel.answer.set()
    for _ in range(10):  # the declare's answer is read, not cut
        await asyncio.sleep(0)
    assert not channel.cut
