"""Text values made storable before they become statement parameters."""

from __future__ import annotations

import re

# NUL: a Postgres text value cannot hold it. A lone surrogate (U+D800-U+DFFF; in a Python str
# every one is lone) is not UTF-8, so the driver cannot encode it. Either fails the write.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` without NUL characters and lone surrogates, so that writing it cannot fail."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub("", text)
