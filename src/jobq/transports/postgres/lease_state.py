"""What the parts of one lease-mode consumer share: the leases it holds, its event counts,
whether its last statement lost the connection, and the event an idle receive wakes on.

Each consumer has its own (``lease.PostgresTransport`` makes it and hands it to its parts: the
statements, the claimer, the acks, the settler and the upkeep); nothing here is global.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from jobq.core.job import Delivery
from jobq.transports.postgres.held import Held, Lease


@dataclass(slots=True, eq=False)
class LeaseState:
    """The leases held, the counts exported (``health``), the lost flag, the wake-up."""

    held: Held = field(default_factory=Held)  # claimed, not yet settled in the database (or lost)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # a NOTIFY, or jobs rescued
    lost: bool = False  # the last statement lost its connection; until one succeeds again
    rescued: int = 0  # expired leases freed by this consumer
    reconnects: int = 0  # LISTEN and pool connections regained after a loss
    stale: int = 0  # outcomes not written: the job's lease had expired
    acks_not_written: int = 0  # of those, acks: the pool counted the job ok, the table not
    leases_lost: int = 0  # jobs a heartbeat found rescued from under this consumer
    lease: float = 12.0  # postgres.lease
    # The crash suspect this consumer holds (claimed by the claim's "lone" CTE), if any: it
    # claims no other until that one is settled or lost, so a crash is charged to one suspect.
    suspect: Lease | None = None

    def let_go(self, leases: Sequence[Lease]) -> None:
        """Their writes ended (``Held.let_go``); a suspect's wakes an idle receive: the next
        suspect may be claimed now, not at the next poll."""
        self.held.let_go(leases)
        if self.suspect is not None and self.suspect in leases:
            self.wake.set()

    def may_claim_suspect(self) -> bool:
        """No suspect held (none claimed, or the one claimed is settled or lost)."""
        return self.suspect is None or not self.held.holds(self.suspect)

    def lapsed(self, delivery: Delivery) -> bool:
        """``Delivery.lapsed``: a heartbeat found the lease lost, or ``lease`` seconds have
        passed since its claim or a heartbeat last renewed it (a blocked event loop, an
        unreachable server), so another consumer may have rescued it."""
        return time.monotonic() > self.held.fresh_since(delivery.handle) + self.lease

    def count_reconnect(self) -> None:
        """A LISTEN or pool connection regained after a loss."""
        self.reconnects += 1

    def stale_outcomes(self, outcome: str, count: int, log: logging.Logger) -> None:
        """Outcomes not written: those jobs' leases expired before they settled."""
        self.stale += count
        if outcome == "ack":
            self.acks_not_written += count
        log.warning(
            "%d %s(s) not written: the job's lease expired before it settled, so it was rescued "
            "and runs again (or is running in another consumer, which writes its outcome); "
            "a handler that blocks the event loop stops the heartbeat (see postgres.lease)",
            count, outcome)
