"""Text values made storable before they become statement parameters."""

from __future__ import annotations

import json
import re

from jobq.core.attempts import AttemptError
from jobq.core.errors import MalformedJob

# NUL: a Postgres text value cannot hold it. A lone surrogate (U+D800-U+DFFF; in a Python str
# every one is lone) is not UTF-8, so the driver cannot encode it. Either fails the write.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # a JSON \u0000 escape, not an escaped backslash


def storable(text: str) -> str:
    """``text`` without NUL characters and lone surrogates, so that writing it cannot fail."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub("", text)


def nul_free(*texts: str) -> None:
    """MalformedJob if a JSON text holds a ``\\u0000`` escape: jsonb cannot store NUL."""
    if any(_NUL.search(text) for text in texts):
        raise MalformedJob("payload or headers contain a NUL character (\\u0000), which "
                           "PostgreSQL cannot store in jsonb")


def error_json(error: AttemptError | None) -> str | None:
    """``error`` as the one-entry JSON array a settle appends to the row's ``errors`` (its
    texts are storable already: ``AttemptError.of``); None when the attempt raised nothing."""
    return None if error is None else json.dumps([error.to_json()], ensure_ascii=False)
