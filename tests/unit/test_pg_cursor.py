"""The lease claim's cursor: past the last claimed job, with a claim from the start at least
every FULL_EVERY seconds and after any short claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobq.transports.postgres.cursor import FULL_EVERY, ClaimCursor

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def key(seconds: float, job_id: int) -> tuple[datetime, int]:
    return (T0 + timedelta(seconds=seconds), job_id)


def test_full_batches_move_the_cursor_and_a_full_claim_comes_every_second() -> None:
    now = [0.0]
    cursor = ClaimCursor(clock=lambda: now[0])
    assert cursor.start() is None  # nothing claimed yet: from the start
    cursor.claimed(None, [key(1, 1), key(2, 2)], limit=2)
    assert cursor.start() == key(2, 2)
    now[0] = 0.5
    cursor.claimed(key(2, 2), [key(3, 4), key(3, 3)], limit=2)
    assert cursor.start() == key(3, 4)  # the largest (run_at, id) claimed
    now[0] = FULL_EVERY
    assert cursor.start() is None  # a second since the last claim from the start


def test_a_short_claim_sends_the_next_one_to_the_start() -> None:
    cursor = ClaimCursor(clock=lambda: 0.0)
    cursor.claimed(None, [key(1, 1), key(2, 2)], limit=2)
    cursor.claimed(key(2, 2), [key(3, 3)], limit=2)
    assert cursor.start() is None
    cursor.claimed(None, [], limit=2)  # an empty queue keeps claiming from the start
    assert cursor.start() is None
