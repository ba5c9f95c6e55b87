"""`jobq completion bash`: the script bash sources completes jobq's sub-commands, the options
of `jobq consume` (the consumer's own) and of the short-named commands."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from jobq.cli import completion
from jobq.cli.main import consumer_parser, producer_parser

CASES = [("jobq", "jobq da", "dashboard"), ("jobq", "jobq jobs sh", "show"),
         ("jobq", "jobq consume --conc", "--concurrency"),
         ("jobq", "jobq enqueue --cou", "--count"),
         ("consumer", "consumer --tr", "--transport"),
         ("producer", "producer --payload-s", "--payload-size")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(("command", "line", "expected"), CASES)
def test_bash_completes_what_the_parsers_accept(command: str, line: str, expected: str) -> None:
    words = line.split(" ")
    code = ("source /dev/stdin <<< \"$SCRIPT\"\n"
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
            f"COMP_POINT={len(line)}; _shtab_{command}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=30,
                          env={"SCRIPT": script("bash"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected], done.stdout


def test_every_shell_gets_the_three_commands() -> None:
    for shell in ("zsh", "tcsh"):
        text = script(shell)
        assert all(name in text for name in ("jobq", "consumer", "producer")), shell


def script(shell: str) -> str:
    return completion.script(shell, consumer_parser, producer_parser)
