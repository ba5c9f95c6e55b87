"""Only the worker decides a job's fate: no module under ``jobq/transports`` makes a decision.

A transport carries decisions out (``settle`` matches on them) and reports facts about a
delivery (``Delivery.malformed``, ``Delivery.fact``); building ``Dead(...)`` or any other
decision there would be a transport deciding.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobq
from jobq.core import job as job_values

TRANSPORTS = Path(jobq.__file__).parent / "transports"
DECISIONS = {cls.__name__ for cls in (job_values.Ack, job_values.RetryIn, job_values.Dead,
                                      job_values.Cancelled, job_values.Release)}
CONSTANTS = {"ACK", "RELEASE"}


def made_in(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each decision built (called) or taken ready-made in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if name in DECISIONS:
                found.append((node.lineno, name))
        elif isinstance(node, ast.Name) and node.id in CONSTANTS:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom) and node.module == "jobq.core.job":
            found += [(node.lineno, a.name) for a in node.names if a.name in CONSTANTS]
    return found


def test_the_check_sees_a_decision_made() -> None:
    tree = ast.parse("from jobq.core.job import ACK, Dead\n"
                     "async def f(t, d):\n"
                     "    await t.settle(d, Dead('no'))\n"
                     "    match d:\n"
                     "        case Dead(reason=r): pass\n")
    assert made_in(tree) == [(1, "ACK"), (3, "Dead")]  # a match pattern is not a decision


def test_no_transport_makes_a_decision() -> None:
    found = [f"{path.relative_to(TRANSPORTS.parent)}:{line}: {name}"
             for path in sorted(TRANSPORTS.rglob("*.py"))
             for line, name in made_in(ast.parse(path.read_text(), str(path)))]
    assert not found, "transports decide nothing; report a fact instead:\n" + "\n".join(found)
