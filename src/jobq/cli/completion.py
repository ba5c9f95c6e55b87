"""``jobq completion bash|zsh|tcsh``: shell completion for ``jobq``, ``consumer`` and
``producer``, made from their own argument parsers by shtab, so it never falls behind an
option. ``jobq consume`` and ``jobq enqueue`` complete as ``consumer`` and ``producer`` do."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import shtab

from jobq.cli.admin_args import admin_parser

Parser = Callable[..., argparse.ArgumentParser]  # (prog=...) -> the command's parser


def script(shell: str, consumer_parser: Parser, producer_parser: Parser) -> str:
    """The completion script of the three commands for ``shell`` (the consumer's and the
    producer's parsers made by the given functions: cli/main.py's)."""
    jobq = admin_parser()
    for action in jobq._actions:  # the sub-commands: the aliases get their real parsers
        if isinstance(action, argparse._SubParsersAction):
            action.choices["consume"] = consumer_parser("jobq consume")
            action.choices["enqueue"] = producer_parser("jobq enqueue")
    return "\n".join(shtab.complete(parser, shell=shell)
                     for parser in (jobq, consumer_parser(), producer_parser()))
