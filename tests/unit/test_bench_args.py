"""The benchmark's command line: lists of numbers are checked before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.run import main, parser


def test_rates_and_consumer_counts_parse_into_tuples() -> None:
    args = parser().parse_args(["--rates", "300,1000.5", "--drain-consumers", "1,2"])
    assert args.rates == (300.0, 1000.5) and args.drain_consumers == (1, 2)


@pytest.mark.parametrize(("argv", "message"), [
    (["--rates", "fast"], "argument --rates: expected comma-separated numbers, got 'fast'"),
    (["--rates", "300,0"], "argument --rates: every value must be > 0, got '300,0'"),
    (["--drain-consumers", "1.5"], "argument --drain-consumers: expected comma-separated numbers"),
])
def test_bad_lists_are_refused_with_the_option_named(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_used_result_directory_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another run's completion records under runs/ would be counted with this run's.
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as stop:
        main(["--out", str(tmp_path), "--quick"])
    assert stop.value.code == 2 and f"--out {tmp_path} is not empty" in capsys.readouterr().err
