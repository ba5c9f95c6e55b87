"""The ``jobq`` command line (cli/admin_args.py): options anywhere, quiet unless -v."""

from __future__ import annotations

import pytest

from jobq.cli.admin_args import SERVING, admin_parser


@pytest.mark.parametrize("argv", [
    # Before: "unrecognized arguments: 42" for every order but the last.
    ["jobs", "show", "-t", "postgres", "-q", "Q", "42", "--json"],
    ["jobs", "show", "42", "-t", "postgres", "-q", "Q", "--json"],
    ["jobs", "-t", "postgres", "show", "-q", "Q", "--json", "42"],
])
def test_options_go_anywhere_on_the_line(argv: list[str]) -> None:
    args = admin_parser().parse_args(argv)
    assert (args.command, args.action, args.id) == ("jobs", "show", "42")
    assert (args.transport, args.queue, args.json) == ("postgres", "Q", True)


def test_a_second_id_is_still_refused() -> None:
    with pytest.raises(SystemExit) as exited:
        admin_parser().parse_args(["jobs", "show", "1", "2"])
    assert exited.value.code == 2


def test_every_one_shot_command_takes_verbose_and_the_serving_ones_do_not() -> None:
    parser = admin_parser()
    assert parser.parse_args(["stats"]).verbose is False
    assert parser.parse_args(["dead", "list", "-v"]).verbose is True
    for serving in SERVING:
        with pytest.raises(SystemExit):
            parser.parse_args([serving, "-v"])
