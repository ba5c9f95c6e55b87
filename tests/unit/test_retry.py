"""RetryPolicy: backoff shape, caps, and the outcome of each kind of failure."""

from __future__ import annotations

import pytest

from jobq import Job, MalformedJob, PermanentError, Retry
from jobq.core.errors import describe
from jobq.core.job import Dead, RetryIn
from jobq.worker.retry import RetryPolicy


def job(attempt: int, max_attempts: int = 5) -> Job:
    return Job(id="1", queue="q", kind="k", payload={}, attempt=attempt, max_attempts=max_attempts)


def test_backoff_doubles_up_to_the_cap_without_jitter() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0, jitter=False)
    assert [policy.backoff(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_full_jitter_stays_between_zero_and_the_ceiling() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=100.0)
    delays = [policy.backoff(4) for _ in range(500)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert max(delays) > 4.0 and min(delays) < 4.0  # spread, not a constant


def test_ordinary_error_is_retried_with_backoff_while_attempts_remain() -> None:
    policy = RetryPolicy(base_delay=2.0, jitter=False)
    assert policy.decide(ValueError("boom"), job(attempt=2)) == RetryIn(4.0, "ValueError: boom")


def test_last_attempt_dead_letters_with_the_error_and_count() -> None:
    decision = RetryPolicy().decide(ValueError("boom"), job(attempt=5, max_attempts=5))
    assert isinstance(decision, Dead)
    assert "ValueError: boom" in decision.reason and "5 of 5" in decision.reason


@pytest.mark.parametrize("error", [PermanentError("no"), MalformedJob("bad json")])
def test_permanent_and_malformed_are_dead_at_once(error: Exception) -> None:
    assert RetryPolicy().decide(error, job(attempt=1)) == Dead(describe(error))


def test_retry_with_explicit_delay_is_honoured_and_capped() -> None:
    policy = RetryPolicy(max_delay=60.0)
    assert policy.decide(Retry(delay=7), job(1)) == RetryIn(7.0, describe(Retry(delay=7)))
    assert policy.decide(Retry(delay=600), job(1)) == RetryIn(60.0, describe(Retry(delay=600)))
    assert isinstance(policy.decide(Retry(delay=1), job(5)), Dead)  # attempts still bound it
