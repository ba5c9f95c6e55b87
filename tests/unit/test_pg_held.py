"""Lease mode's record of the leases held: when each was last known good (Delivery.lapsed)."""

from __future__ import annotations

from jobq.transports.postgres.held import Held


def test_empty_claims_leave_nothing_behind() -> None:
    # A reviewer found an idle consumer's empty claims (one a second, with NOTIFY wakes more)
    # each kept a token for ever: 100,000 claims, 100,000 entries. Fails on that code.
    held = Held()
    for n in range(1000):
        held.claimed(f"c/{n}", [], sent=float(n))
    assert held._fresh == {}


def test_a_lease_is_fresh_from_its_claim_then_from_each_heartbeat_that_renewed_it() -> None:
    held = Held()
    held.claimed("c/1", [1, 2], sent=10.0)
    assert held.fresh_since((1, "c/1")) == 10.0
    held.renewed([(1, "c/1"), (2, "c/1")], sent=14.0)
    assert held.fresh_since((2, "c/1")) == 14.0
    held.let_go([(1, "c/1"), (2, "c/1")])
    assert held.fresh_since((1, "c/1")) == 0.0  # not held: lapsed at once
    held.claimed("c/2", [3], sent=20.0)
    held.renewed([(3, "c/2")], sent=24.0)
    assert set(held._fresh) == {"c/2"}  # the tokens no longer held are forgotten
