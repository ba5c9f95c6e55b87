"""What the parts of one transaction-mode consumer share: whether it is closing or paused, the
sweep and whether it ran dry, the jobs taken and ready for the pool's next receive, those out
(handed to the pool and not yet settled), and the events a waiting receive wakes on.

Each consumer has its own (``transaction.PgTransactionTransport`` makes it and hands it to its
parts: the holdings, the claim tasks, the scheduler, the taker and the settler); nothing here
is global.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from jobq.core.job import Delivery
from jobq.transports.postgres.claims import Sweep


@dataclass(slots=True, eq=False)
class TxnState:
    """The facts one transaction-mode consumer's parts share."""

    slots: int  # jobs that may run at once (the concurrency, less if the pool is too small)
    closing: bool = False
    paused: bool = False  # no job is taken with an ack's COMMIT while paused or closing
    ready: list[Delivery] = field(default_factory=list)  # taken for a free worker, not handed out
    out: set[int] = field(default_factory=set)  # the ids of the jobs handed out, not yet settled
    error: BaseException | None = None  # a failed claim, raised when nothing else is left
    sweep: Sweep = field(default_factory=lambda: Sweep(None, 0.0))
    dry: bool = False  # the last claim found nothing: wait for news before claiming again
    news: bool = False  # a NOTIFY came since the sweep began
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # a NOTIFY, or a slot freed
    claim_done: asyncio.Event = field(default_factory=asyncio.Event)  # a claim task finished

    def sweep_again(self) -> None:
        """The sweep from the start of the due jobs, and a pick woken: jobs handed back lie
        behind the cursor (a --once sweep would end without them)."""
        self.sweep = Sweep(self.sweep.until, asyncio.get_running_loop().time())
        self.dry = False
        self.wake.set()

    def notify(self) -> None:
        """A NOTIFY for the queue (or the LISTEN connection is back): new jobs may be due."""
        self.news = True
        self.wake.set()
