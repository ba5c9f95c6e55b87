"""mypy --strict catches a wrong argument type at a task's enqueue call (and nothing else)."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

CASE = Path(__file__).parent.parent / "typing" / "enqueue_typed.py"


def test_mypy_reports_every_wrong_typed_enqueue_and_only_those() -> None:
    expected = {number: line.split("# error: ", 1)[1].strip()
                for number, line in enumerate(CASE.read_text().splitlines(), 1)
                if "# error: " in line}
    assert len(expected) == 3
    out, err, _ = api.run(["--strict",
                           "--hide-error-context", "--no-error-summary", str(CASE)])
    reported = {}
    for line in out.splitlines():
        match = re.match(r".*enqueue_typed\.py:(\d+): error: (.*?)(  \[[a-z-]+\])?$", line)
        assert match, (line, out, err)
        reported[int(match.group(1))] = match.group(2)
    assert reported == expected, out
