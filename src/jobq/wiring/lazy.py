"""Backends imported on first use, and the one line said when a backend's driver is missing."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from jobq.core.errors import ConfigError

EXTRAS = {"psycopg": "postgres", "psycopg_pool": "postgres", "aio_pika": "rabbitmq",
          "aiormq": "rabbitmq"}  # a backend's driver -> the extra that installs it


def missing_extra(exc: ModuleNotFoundError) -> ConfigError | None:
    """The one line to say when a backend's driver is not installed (None: another module)."""
    extra = EXTRAS.get((exc.name or "").partition(".")[0])
    if extra is None:
        return None
    return ConfigError(f"the {extra} backend needs its driver ({exc.name}), which is not "
                       f"installed: pip install 'jobq[{extra}]'", key="transport")


def lazy(path: str) -> Callable[..., Any]:
    """A factory for the class at ``"module:Name"``, importing its module on the first call."""
    module, _, name = path.partition(":")

    def make(*args: Any, **kwargs: Any) -> Any:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            said = missing_extra(exc)
            if said is None:
                raise
            raise said from exc
        return getattr(found, name)(*args, **kwargs)

    make.__qualname__ = make.__name__ = name
    return make
