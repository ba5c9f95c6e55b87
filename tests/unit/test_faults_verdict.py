"""The fault suite's pass condition (faults/verdict.py): counts in, the reasons it failed out."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from faults.verdict import Counts, duplicate_bound, tally, verdict

CLEAN = Counts(lost=0, unfinished=0, dead=0, done_and_dead=0, duplicates=40,
               duplicate_bound=duplicate_bound(32, 5), survivors=3, survivors_exit_0=3)


def test_a_clean_run_passes() -> None:
    assert verdict(CLEAN) == []


def test_the_bound_is_one_capacity_per_exposure() -> None:
    assert duplicate_bound(32, 5) == 160 and duplicate_bound(32, 0) == 0


@pytest.mark.parametrize(("change", "reason"), [
    ({"lost": 1}, "1 job(s) lost"),
    ({"unfinished": 2}, "2 job(s) neither done nor dead"),
    # The old pass condition only looked at lost and unfinished: each case below passed it.
    ({"dead": 1}, "1 job(s) dead where 0 were meant to die"),
    ({"done_and_dead": 1}, "1 job(s) recorded both done and dead"),
    ({"duplicates": 161}, "161 duplicates, more than the bound 160"),
    ({"survivors_exit_0": 2}, "1 of 3 survivors did not exit 0"),
])
def test_each_broken_condition_fails_the_run_and_says_which(
        change: dict[str, int], reason: str) -> None:
    (failure,) = verdict(replace(CLEAN, **change))
    assert failure.startswith(reason)


def test_duplicates_at_the_bound_and_expected_deaths_pass() -> None:
    assert verdict(replace(CLEAN, duplicates=160, dead=2, dead_expected=2)) == []


def test_no_exposure_means_no_duplicate_is_allowed() -> None:
    assert verdict(replace(CLEAN, duplicates=1, duplicate_bound=duplicate_bound(32, 0)))


def test_every_broken_condition_is_reported_not_just_the_first() -> None:
    assert len(verdict(replace(CLEAN, lost=1, dead=1, done_and_dead=1))) == 3


def test_tally_finds_lost_duplicated_dead_after_done_and_strangers() -> None:
    recorded = Counter({"1": 1, "2": 3, "4": 1, "9": 1})
    found = tally(["1", "2", "3", "4", "5"], recorded, done={"1", "2", "5"},
                  dead={"4": "lost mid-job", "3": "bad"})
    assert found.lost == {"5"}  # done without ever completing: acked, never run
    assert found.done_unrecorded == {"5"}
    assert found.done_and_dead == {"4"}
    assert found.strangers == {"9"}
    assert found.duplicates == 2


def test_tally_with_nothing_done_still_sees_unrecorded_jobs_as_lost() -> None:
    # RabbitMQ's done used to be always empty: a job acked without a completion then showed
    # up only as "lost", never as done without a completion.
    found = tally(["1", "2"], Counter({"1": 1}), done={"1", "2"}, dead={})
    assert found.lost == {"2"} and found.done_unrecorded == {"2"}


def test_a_crash_adds_the_jobs_completed_in_its_window_to_the_bound() -> None:
    # A Postgres crash undoes the claims and acks of the last ~3 x wal_writer_delay: the jobs
    # completed then run again (duplicates), on top of what the exposed consumers held.
    assert duplicate_bound(32, 5, crash_window_jobs=240) == 400
    crashed = replace(CLEAN, duplicates=400, duplicate_bound=duplicate_bound(32, 5, 240))
    assert verdict(crashed) == []
    (failure,) = verdict(replace(crashed, duplicates=401))
    assert failure == ("401 duplicates, more than the bound 400 (capacity x exposures + jobs "
                       "done in crash windows)")


def test_tally_counts_a_job_still_queued_as_unfinished_not_lost() -> None:
    # A run that timed out leaves jobs queued: the verdict names them unfinished. Counting
    # them lost as well made a slow run look like one that lost thousands of jobs.
    found = tally(["1", "2", "3"], Counter({"1": 1}), done={"1"}, dead={}, waiting={"2"})
    assert found.lost == {"3"}  # gone from the backend, never completed: lost
