"""The runner of the documentation's code blocks (tests/docs_run.py) fails where a page is wrong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs_run import run_page

PAGE = '''# A page

## Setup

```python title="data.txt"
hello
```

```sh
pip install nothing-at-all
export GREETING=hi
cat data.txt
```

```text
hello
```

## Use

```sh
echo "$GREETING there"
```

```text
{said}
```
'''


def page(tmp_path: Path, said: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE.format(said=said))
    return path


def test_a_page_that_prints_what_it_says_passes_and_keeps_its_exports(tmp_path: Path) -> None:
    outputs = run_page(page(tmp_path, "hi there"), tmp_path, dict(os.environ))
    assert outputs == ["hello\n", "hi there\n"]  # the pip line is the caller's, not run


def test_a_page_that_says_what_is_not_printed_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="not printed"):
        run_page(page(tmp_path, "bye"), tmp_path, dict(os.environ))


def test_a_failing_command_fails_and_a_section_runs_alone(tmp_path: Path) -> None:
    path = page(tmp_path, "hi there")
    with pytest.raises(AssertionError, match="exit 1"):  # GREETING unset under set -u
        run_page(path, tmp_path, dict(os.environ), heading="## Use")
    assert run_page(path, tmp_path, dict(os.environ), heading="## Setup") == ["hello\n"]
