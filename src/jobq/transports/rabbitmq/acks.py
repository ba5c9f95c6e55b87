"""Which acks settle a channel's completed deliveries with the fewest frames.

Delivery tags on a consuming channel run 1, 2, 3, ... An ack with ``multiple=True`` settles
every outstanding tag up to its own, so once every tag up to N has completed, one frame settles
them all. A tag still running holds the ones after it back; those are acked one by one once
they have waited ``ack_interval`` (else a single long job would pin the whole prefetch window).
"""

from __future__ import annotations


class AckTracker:
    """Completed delivery tags of one channel, turned into acks (pure bookkeeping, no I/O)."""

    __slots__ = ("_base", "_done", "_unsent")

    def __init__(self) -> None:
        self._base = 0  # every tag <= _base is settled (acked, or about to be by the next frame)
        self._done: set[int] = set()  # tags > _base that completed (acked or not)
        self._unsent: set[int] = set()  # completed tags no ack frame has covered yet

    def complete(self, tag: int) -> None:
        """``tag`` finished and must be acked."""
        self._done.add(tag)
        self._unsent.add(tag)

    def settled_elsewhere(self, tag: int) -> None:
        """``tag`` was settled by another frame (a nack): count it as done, ack nothing for it."""
        self._done.add(tag)
        self._unsent.discard(tag)

    def contiguous(self) -> int | None:
        """The tag for one ``multiple=True`` ack covering every completed tag without a gap.

        None when there is nothing new to ack that way. Tags settled one by one are passed over:
        the frame names the highest still-outstanding tag, never an already-acked one (the
        broker would close the channel on an unknown tag).
        """
        base, done, unsent = self._base, self._done, self._unsent
        top = None
        while base + 1 in done:
            base += 1
            done.discard(base)
            if base in unsent:
                unsent.discard(base)
                top = base
        self._base = base
        return top

    def stragglers(self) -> list[int]:
        """Completed tags behind a gap, to ack one by one; they count as sent from now."""
        tags = sorted(self._unsent)
        self._unsent.clear()
        return tags

    @property
    def owed(self) -> int:
        """How many completed tags no ack has covered yet."""
        return len(self._unsent)

    def unsent_now(self) -> frozenset[int]:
        """The completed tags no ack frame has covered yet, as of now."""
        return frozenset(self._unsent)

    def any_unsent(self, tags: frozenset[int]) -> bool:
        """True while one of ``tags`` is not yet covered by an ack frame."""
        return not self._unsent.isdisjoint(tags)

    @property
    def waiting(self) -> bool:
        """True when completed tags are not yet covered by an ack."""
        return bool(self._unsent)
