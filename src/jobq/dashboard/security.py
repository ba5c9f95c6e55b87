"""The dashboard's guard on actions: a login with the token, a signed session cookie, a CSRF
token bound to the session, and the request's Origin checked against its Host."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

COOKIE = "jobq_session"


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of texts, any characters (a str compare_digest raises on
    non-ASCII: a forged cookie must read as no session, not as a server error)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


class Guard:
    """Who may act: a browser that logged in with ``token`` (no token: nobody, read-only)."""

    def __init__(self, token: str, *, read_only: bool = False) -> None:
        self._token = token
        self.read_only = read_only or not token
        self._key = secrets.token_bytes(32)  # sessions end with the process

    def login(self, given: str) -> str | None:
        """A session cookie's value for the right token, else None."""
        if self.read_only or not _same(given, self._token):
            return None
        session = secrets.token_urlsafe(24)
        return f"{session}.{self._sign('session', session)}"

    def session(self, cookie: str | None) -> str | None:
        """The session a cookie proves, or None (absent, forged, or read-only)."""
        if self.read_only or not cookie or "." not in cookie:
            return None
        session, _, mac = cookie.rpartition(".")
        return session if _same(mac, self._sign("session", session)) else None

    def csrf(self, session: str | None) -> str:
        """The CSRF token every form of this session carries ("" without a session)."""
        return self._sign("csrf", session) if session else ""

    def allows(self, cookie: str | None, csrf: str, origin: str | None, host: str | None) -> bool:
        """Whether a POST may act: a session, its CSRF token, and no foreign Origin."""
        session = self.session(cookie)
        if session is None or not _same(csrf, self.csrf(session)):
            return False
        return origin is None or urlsplit(origin).netloc == (host or "")

    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()
