"""The event loop a command runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a command runs on: uvloop if asked for (and installed), else asyncio's."""
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:  # e.g. a platform without uvloop wheels: the stock loop works too
            return None
        return uvloop.new_event_loop
    return None
