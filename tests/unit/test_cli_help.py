"""Every option of every command says what it does in its --help (a --help that reads like the
docs), and every command says what it is for."""

from __future__ import annotations

import argparse

import pytest

from jobq.cli.admin_args import admin_parser
from jobq.cli.main import consumer_parser, producer_parser


def parsers() -> dict[str, argparse.ArgumentParser]:
    found = {"consumer": consumer_parser(), "producer": producer_parser()}
    admin = admin_parser()
    for action in admin._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"jobq {name}"] = sub
    return found


@pytest.mark.parametrize("name", sorted(parsers()))
def test_every_option_says_what_it_does(name: str) -> None:
    parser = parsers()[name]
    silent = [action.option_strings[0] if action.option_strings else action.dest
              for action in parser._actions
              if not action.help and not isinstance(action, argparse._HelpAction)]
    assert not silent, f"{name}: no help for {silent}"
    assert parser.description, f"{name}: no description"
