"""AckTracker: the fewest acks that settle a channel's completed deliveries."""

from __future__ import annotations

from jobq.transports.rabbitmq.acks import AckTracker


def test_in_order_completions_are_one_multiple_ack() -> None:
    acks = AckTracker()
    for tag in (1, 2, 3):
        acks.complete(tag)
    assert acks.owed == 3
    assert acks.contiguous() == 3
    assert not acks.waiting and acks.contiguous() is None


def test_a_running_tag_holds_back_the_ones_after_it() -> None:
    acks = AckTracker()
    for tag in (2, 3):
        acks.complete(tag)
    assert acks.contiguous() is None  # 1 still runs: acking 3 with multiple would ack it too
    assert acks.waiting
    acks.complete(1)
    assert acks.contiguous() == 3


def test_stragglers_are_acked_one_by_one_and_never_named_again() -> None:
    acks = AckTracker()
    for tag in (2, 3, 5):
        acks.complete(tag)
    assert acks.contiguous() is None
    assert acks.stragglers() == [2, 3, 5]
    assert not acks.waiting
    acks.complete(1)
    # 1 is the only outstanding tag up to 3: the frame must name 1, not the acked 3
    assert acks.contiguous() == 1
    acks.complete(4)
    assert acks.contiguous() == 4  # 5 was acked alone, so the walk stops naming at 4
    acks.complete(6)
    assert acks.contiguous() == 6


def test_a_nacked_tag_fills_its_gap_without_being_acked() -> None:
    acks = AckTracker()
    acks.complete(1)
    acks.settled_elsewhere(2)
    acks.complete(3)
    assert acks.contiguous() == 3
    acks.settled_elsewhere(4)
    assert acks.contiguous() is None and not acks.waiting
