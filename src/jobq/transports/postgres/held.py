"""Lease mode's record of the claims a consumer holds, for fencing its writes to them.

Every claim has a token (``locked_by``: the consumer's id and the claim's number). A delivery's
handle is a ``Lease``, the job's id and that token, and every write after the claim matches
both, so a delivery whose lease expired never settles a newer claim of the same job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


class Lease(NamedTuple):
    """A lease-mode delivery's handle: the job's id and the token of the claim that took it."""

    id: int
    token: str


def pairs(leases: Iterable[Lease]) -> dict[str, list[Any]]:
    """Parameters ``ids`` and ``tokens`` of a statement fenced to several claims."""
    ids, tokens = [], []
    for lease in leases:
        ids.append(lease.id)
        tokens.append(lease.token)
    return {"ids": ids, "tokens": tokens}


class Held:
    """The leases this consumer holds (claimed, not yet settled or found lost), by job id."""

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._writing: set[Lease] = set()  # settles in flight: a heartbeat must not call them lost
        self.unsure: set[Lease] = set()  # acks of a flush that failed: it may have committed

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def __contains__(self, lease: object) -> bool:
        return isinstance(lease, Lease) and self._by_id.get(lease.id) == lease.token

    def claimed(self, token: str, ids: Iterable[int]) -> None:
        """A claim took the jobs ``ids`` (a newer claim of a job replaces the older one)."""
        self._by_id.update((job_id, token) for job_id in ids)

    def leases(self) -> list[Lease]:
        """Every lease held now."""
        return [Lease(*item) for item in self._by_id.items()]

    def writing(self, leases: Iterable[Lease]) -> None:
        """Settles of ``leases`` are being written."""
        self._writing.update(leases)

    def written(self, leases: Iterable[Lease], *, settled: bool) -> None:
        """Their writes ended; ``settled``: let them go (never a newer claim of the same job)."""
        for lease in leases:
            self._writing.discard(lease)
            if settled and lease in self:
                del self._by_id[lease.id]

    def drop_lost(self, asked: Iterable[Lease], kept: Iterable[Lease]) -> list[Lease]:
        """After a heartbeat of ``asked`` that renewed ``kept``: drop and return the lost ones.

        Not lost: settled meanwhile (their write may have committed before the heartbeat ran),
        or acked by a flush that failed late.
        """
        renewed = set(kept)
        lost = [lease for lease in asked if lease not in renewed and lease in self
                and lease not in self._writing and lease not in self.unsure]
        for lease in lost:
            del self._by_id[lease.id]
        return lost
