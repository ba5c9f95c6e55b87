"""Run a Markdown page's code blocks as a reader would, and check what it says they print.

A block ```` ```python title="name.py" ```` is a file the reader writes: it is written. A
```` ```sh ```` block is typed into a shell: it runs (``bash -euo pipefail``, in the same
directory, the variables it exports kept for the next block); its ``pip install`` lines are
the reader's set-up, which the caller has done. A ```` ```text ```` block after it is what it
prints: each of its lines must appear in that output. Blocks of other languages are prose.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w+)?(?:[ \t]+title=\"([^\"]+)\")?[ \t]*\n(.*?)^```[ \t]*$",
                   re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    language: str
    title: str | None
    text: str


def blocks(markdown: str) -> list[Block]:
    """The fenced code blocks of ``markdown``, in order."""
    return [Block(m.group(1) or "", m.group(2), m.group(3)) for m in FENCE.finditer(markdown)]


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a line such as ``## A first program``), up to the next
    heading of its level or above."""
    level = heading.split(" ", 1)[0]
    start = markdown.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", markdown[start:], re.MULTILINE)]
    return markdown[start:start + ends[0]] if ends else markdown[start:]


def run_page(page: Path, directory: Path, env: dict[str, str], *, heading: str | None = None,
             timeout: float = 120) -> list[str]:
    """Run ``page``'s blocks (those under ``heading`` only, if given) in ``directory`` with
    ``env``; the output of each shell block. AssertionError naming the block when one fails
    or does not print what the page says."""
    env = dict(env)
    outputs: list[str] = []
    text = page.read_text()
    for block in blocks(text if heading is None else section(text, heading)):
        if block.title is not None:
            (directory / block.title).write_text(block.text)
        elif block.language == "sh":
            outputs.append(_shell(block.text, directory, env, timeout))
        elif block.language == "text" and outputs:
            missing = [line for line in block.text.splitlines()
                       if line.strip() and line.strip() not in outputs[-1]]
            assert not missing, f"{page.name}: not printed: {missing}\n--- output:\n{outputs[-1]}"
    return outputs


def _shell(script: str, directory: Path, env: dict[str, str], timeout: float) -> str:
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("pip install")]
    dump = directory / ".env-after"
    body = "\n".join(["set -euo pipefail", *lines, f"env -0 > {dump}"])
    done = subprocess.run(["bash", "-c", body], cwd=directory, env=env, capture_output=True,
                          text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"exit {done.returncode} from:\n{script}\n--- output:\n{output}"
    env.clear()
    env.update(item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
    dump.unlink()
    return output


def venv_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a reader whose shell has ``bin_dir`` first on PATH (an activated
    virtualenv), with no JOBQ_ variable of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBQ_", "PYTHON"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env
