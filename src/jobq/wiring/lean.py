"""dependency-injector imported for a jobq command without FastAPI.

dependency-injector's ``containers`` imports its ``wiring``, which imports FastAPI when it is
installed (to read FastAPI's ``Depends`` markers in ``@inject``), and FastAPI imports
OpenTelemetry when that is installed. No jobq command uses ``@inject``; in a virtualenv that
holds FastAPI (a web app's, with its consumers beside it) that import doubled every command's
start: ``import jobq.wiring.container`` took 0.43 s of CPU here, 0.20 s without it. So a command
(``cli/main.py``'s entry points) imports it first, with FastAPI hidden for that one import; a
module imported afterwards (an app's tasks) imports FastAPI as usual. jobq used as a library
(``jobq.App`` inside a FastAPI app) does not go through this: dependency-injector then keeps
its FastAPI support for the application's own ``@inject``.
"""

from __future__ import annotations

import sys


def import_container_without_fastapi() -> None:
    """Import dependency-injector's containers with FastAPI hidden (nothing if either is
    imported already)."""
    if "fastapi" in sys.modules or "dependency_injector.containers" in sys.modules:
        return
    sys.modules["fastapi"] = None  # type: ignore[assignment]  # import fastapi: ImportError
    try:
        from dependency_injector import containers  # noqa: F401
    finally:
        del sys.modules["fastapi"]
