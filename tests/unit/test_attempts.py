"""Each failed attempt's record (core/attempts.py): what it keeps, its bounds, a lenient read."""

from __future__ import annotations

import json

from jobq.core.attempts import (
    ERRORS_KEPT,
    HEADER_BUDGET,
    TRACEBACK_KEPT,
    AttemptError,
    appended,
    history,
    render_error,
)


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def deep(n: int) -> None:
    if n:
        deeper(n - 1)  # two functions in turn: Python folds only a frame repeated in a row
    raise RuntimeError("at the bottom")


def deeper(n: int) -> None:
    deep(n)


def test_a_record_names_the_error_and_keeps_its_traceback() -> None:
    record = AttemptError.of(raised(KeyError("to")), 3)
    assert (record.attempt, record.type, record.message) == (3, "KeyError", "'to'")
    assert record.traceback is not None and "raise error" in record.traceback
    assert AttemptError.of(raised(ValueError("x")), 1, trace=False).traceback is None


def test_a_long_traceback_keeps_its_end_where_the_exception_is() -> None:
    try:
        deep(200)
    except RuntimeError as exc:
        record = AttemptError.of(exc, 1)
    assert record.traceback is not None
    assert record.traceback.startswith("...\n") and len(record.traceback) == TRACEBACK_KEPT + 4
    assert record.traceback.rstrip().endswith("RuntimeError: at the bottom")


def test_texts_no_driver_can_store_are_escaped() -> None:
    record = AttemptError.of(raised(ValueError("nul \x00 and \udc80")), 1)
    assert "\x00" not in record.message and "\udc80" not in record.message
    json.dumps(record.to_json()).encode()  # storable as JSON text, and as UTF-8


def test_the_history_keeps_the_latest_attempts() -> None:
    stored = None
    for attempt in range(1, ERRORS_KEPT + 4):
        stored = appended(stored, AttemptError.of(ValueError(str(attempt)), attempt, trace=False))
    assert [e.attempt for e in history(stored)] == list(range(4, ERRORS_KEPT + 4))


def test_the_history_fits_its_header_budget_dropping_the_oldest_first() -> None:
    big = AttemptError.of(ValueError("m" * 1500), 1)
    stored = None
    for attempt in range(1, ERRORS_KEPT + 1):
        stored = appended(stored, AttemptError.of(ValueError("m" * 1500), attempt))
    assert stored is not None and len(stored.encode()) <= HEADER_BUDGET
    kept = [e.attempt for e in history(stored)]
    assert kept[-1] == ERRORS_KEPT and len(kept) < ERRORS_KEPT
    assert kept == list(range(ERRORS_KEPT - len(kept) + 1, ERRORS_KEPT + 1))
    alone = appended(None, big, budget=10)  # the newest always stays, whatever the budget
    assert [e.attempt for e in history(alone)] == [1]


def test_what_another_writer_stored_is_read_without_failing() -> None:
    assert history(None) == [] and history("[]") == []
    odd = history('[{"attempt": "x"}, 7, {"attempt": 2, "at": "2026-01-01T00:00:00+00:00"}]')
    assert [e.type for e in odd] == ["?", "?", "?"] and odd[2].attempt == 2
    assert history(b"not json")[0].message.startswith("unreadable entry")
    assert history({"an": "object"})[0].message.startswith("unreadable entry")


def test_a_person_reads_the_error_then_its_traceback_indented() -> None:
    shown = render_error(AttemptError.of(raised(ValueError("no")), 2).to_json())
    first, *rest = shown.splitlines()
    assert first.startswith("  attempt 2 at ") and first.endswith("ValueError: no")
    assert rest[0] == "    Traceback (most recent call last):"


def test_one_attempt_larger_than_the_budget_is_cut_to_fit_its_end_kept() -> None:
    wide = AttemptError.of(raised(ValueError("\u0001é" * 1900)), 1)  # escapes, 2-byte chars
    text = appended(None, wide, budget=2000)
    assert len(text.encode()) <= 2000
    (kept,) = history(text)
    assert kept.type == "ValueError" and kept.traceback is None  # its traceback went first
    assert kept.message.startswith("...") and "\u0001é" in kept.message  # then its head


def test_a_foreign_history_that_breaks_every_rule_still_reads_and_appends() -> None:
    odd = '[{"attempt": 1e400, "at": "2026-01-01T00:00:00"}, {"at": "x", "message": "\\ud800"}]'
    assert [e.type for e in history(odd)] == ["?", "?"]
    assert history("[" * 100_000) and history(b"\xff\xfe")  # too deep; not UTF-8
    text = appended(odd, AttemptError.of(ValueError("now"), 3))
    text.encode()  # no lone surrogate left to fail the header's encoding
    assert [e.attempt for e in history(text)][-1] == 3
