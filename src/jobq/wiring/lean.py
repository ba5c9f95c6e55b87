"""dependency-injector imported for a jobq command without the web libraries it looks for.

dependency-injector's ``containers`` imports its ``wiring``, which imports FastAPI, Starlette,
fast_depends and werkzeug when they are installed (to read their markers in ``@inject`` and to
skip their request objects when wiring), and its ``providers`` imports pydantic (to find
pydantic 1's ``BaseSettings`` for ``Configuration.from_pydantic``). FastAPI imports
OpenTelemetry when that is installed. No jobq command uses ``@inject`` or ``from_pydantic``; in
a virtualenv that holds FastAPI (a web app's, with its consumers beside it) those imports
doubled every command's start: ``import jobq.wiring.container`` took 0.43 s of CPU here, 0.20 s
without FastAPI; Starlette's requests and pydantic were 60 ms more of a 0.33 s ``jobq stats``.

So a command (``cli/main.py``'s entry points) imports it first, with those hidden for that one
import; a module imported afterwards (an app's tasks) imports them as usual. pydantic is
hidden only where hiding it changes nothing: pydantic 2 without pydantic-settings, which
dependency-injector then does not use. jobq used as a library (``jobq.App`` inside a FastAPI
app) does not go through this: dependency-injector then keeps all of its integrations for
the application's own ``@inject``.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

WEB = ("fastapi", "starlette", "fast_depends", "werkzeug")


def import_container_lean() -> None:
    """Import dependency-injector's containers with the libraries above hidden (nothing if it
    is imported already; one of them imported already stays found)."""
    if "dependency_injector.containers" in sys.modules:
        return
    hiding = _Hidden({m for m in (*WEB, *(["pydantic"] if _pydantic_unused() else []))
                      if m not in sys.modules})
    sys.meta_path.insert(0, hiding)
    try:
        from dependency_injector import containers  # noqa: F401
    finally:
        sys.meta_path.remove(hiding)


class _Hidden(importlib.abc.MetaPathFinder):
    """Makes ``import <name>`` (and its submodules) fail as if not installed. A finder, not a
    ``None`` in ``sys.modules``: dependency-injector's compiled modules take that ``None`` as
    the module itself."""

    def __init__(self, names: set[str]) -> None:
        self._names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        """None (look further) for a name not hidden; ModuleNotFoundError for one hidden."""
        if fullname.partition(".")[0] in self._names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _pydantic_unused() -> bool:
    """Whether dependency-injector would import pydantic for nothing: pydantic 2 (or none)
    and no pydantic-settings."""
    if importlib.util.find_spec("pydantic_settings") is not None:
        return False
    try:
        return not importlib.metadata.version("pydantic").startswith("1.")
    except importlib.metadata.PackageNotFoundError:
        return True
