"""Lease mode's record of the claims a consumer holds, for fencing its writes to them.

Every claim has a token (``locked_by``: the consumer's id and the claim's number). A delivery's
handle is a ``Lease``, the pair (job id, that token), and every write after the claim matches
both, so a delivery whose lease expired never settles a newer claim of the same job. Plain
tuples: an ack costs a few of these operations per job, and a no-op job's whole budget is
a few dozen microseconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

Lease = tuple[int, str]  # (job id, claim token)


def pairs(leases: Sequence[Lease]) -> dict[str, str]:
    """Parameters ``ids`` and ``tokens`` of a statement fenced to several claims.

    Comma-separated text, split by the statement (``string_to_array``): psycopg dumps a list
    parameter element by element in Python (a dump and a regex per element), which on an ack
    batch costs more per job than the rest of the ack. Neither an id nor a token (host:pid:hex/n)
    holds a comma.
    """
    return {"ids": ",".join([str(lease[0]) for lease in leases]),
            "tokens": ",".join([lease[1] for lease in leases])}


class Held:
    """The leases this consumer holds (claimed, not yet settled or found lost), by job id."""

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._settling: set[Lease] = set()  # retries, dead-letters, releases being written
        self.flushing: list[Sequence[Lease]] = []  # batches of acks being written
        self.unsure: set[Lease] = set()  # acks of a flush that failed: it may have committed
        # Claim token -> when its leases were last known good (time.monotonic() as the claim or
        # a heartbeat that renewed them went out): ``lapsed`` is told from it.
        self._fresh: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def holds(self, lease: Lease) -> bool:
        """Whether ``lease`` is still ours (not settled, not lost, not claimed again since)."""
        return self._by_id.get(lease[0]) == lease[1]

    def claimed(self, token: str, ids: Iterable[int], sent: float) -> None:
        """A claim sent at ``sent`` took the jobs ``ids`` (a newer claim of a job replaces the
        older one)."""
        claimed = [(job_id, token) for job_id in ids]
        if claimed:  # not for an empty claim: an idle consumer makes one a second, for ever
            self._by_id.update(claimed)
            self._fresh[token] = sent

    def renewed(self, leases: Iterable[Lease], sent: float) -> None:
        """A heartbeat sent at ``sent`` renewed ``leases``; forget the tokens no longer held."""
        fresh = self._fresh
        for _, token in leases:
            fresh[token] = sent
        if len(fresh) > 1:
            held = set(self._by_id.values())
            for token in [t for t in fresh if t not in held]:
                del fresh[token]

    def fresh_since(self, lease: Lease) -> float:
        """When ``lease`` was last known good (0: it is not held)."""
        return self._fresh.get(lease[1], 0.0) if self.holds(lease) else 0.0

    def ids(self) -> list[int]:
        """The ids of the jobs held."""
        return list(self._by_id)

    def leases(self) -> list[Lease]:
        """Every lease held now."""
        return list(self._by_id.items())

    def settling(self, lease: Lease) -> None:
        """A retry, dead-letter or release of ``lease`` is being written."""
        self._settling.add(lease)

    def let_go(self, leases: Iterable[Lease]) -> None:
        """Their writes ended: stop holding them (never a newer claim of the same job)."""
        by_id = self._by_id
        for job_id, token in leases:
            if by_id.get(job_id) == token:
                del by_id[job_id]
        if self._settling:
            self._settling.difference_update(leases)

    def drop_lost(self, asked: Iterable[Lease], renewed: Iterable[Lease]) -> list[Lease]:
        """After a heartbeat of ``asked`` that renewed ``renewed``: drop and return the lost ones.

        Not lost: settled meanwhile (their write may have committed before the heartbeat ran),
        or acked by a flush that failed late.
        """
        kept = set(renewed)
        lost = [lease for lease in asked if lease not in kept and self.holds(lease)]
        if lost:
            writing = self._settling.union(itertools.chain.from_iterable(self.flushing),
                                           self.unsure)
            lost = [lease for lease in lost if lease not in writing]
        for job_id, _ in lost:
            del self._by_id[job_id]
        return lost
