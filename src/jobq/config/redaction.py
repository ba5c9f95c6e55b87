"""Passwords kept out of logs and errors."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

PASSWORD_RE = re.compile(r"(password\s*=\s*)\S+")  # a key-value DSN's, or one quoted in an error


def mask_passwords(text: str) -> str:
    """``text`` with the value of every ``password=...`` replaced by ``***``."""
    return PASSWORD_RE.sub(r"\1***", text)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return mask_passwords(url)
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))
