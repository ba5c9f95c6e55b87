"""Which failures to connect to RabbitMQ are an operator's mistake (``Refused``: exit 2 at once)
and which are the broker being away (retried with backoff, then exit 3)."""

from __future__ import annotations

import ssl
from urllib.parse import unquote, urlsplit

import aiormq

from jobq.core.errors import Refused
from jobq.transports import common
from jobq.transports.rabbitmq.topology import node_down

# A refused login: a wrong user or password (the broker's ACCESS_REFUSED), or a mechanism it
# does not offer (the url's ?auth=).
LOGIN_REFUSED = (aiormq.exceptions.AuthenticationError,
                 aiormq.exceptions.ProbableAuthenticationError)
# What aiormq raises when the broker answers connection.open with connection.close: the vhost
# does not exist, or the user has no permission on it (NOT_ALLOWED). aiormq checks the answer's
# type before it looks for a close, so the broker's reply text is lost: this is the only sign.
VHOST_CLOSE = "got <Connection.Close"
# OpenSSL's words for the other end not speaking TLS (amqps:// to a plain AMQP port).
NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure",
           "packet length too long", "http request")


def vhost_of(url: str) -> str:
    """The vhost a URL names, as aiormq reads it: its path without the first '/', else '/'."""
    path = urlsplit(url).path
    return "/" if path in ("", "/") else unquote(path[1:])


def refusal(exc: BaseException, url: str, where: str, key: str) -> Refused | None:
    """``exc`` (from a connect to ``url``, at ``where``) as a Refused naming what to check in
    ``key`` (rabbitmq.url or rabbitmq.urls), or None if the broker may answer later."""
    user = urlsplit(url).username or "guest"
    if isinstance(exc, LOGIN_REFUSED):
        return Refused(f"RabbitMQ at {where} refused the login of user {unquote(user)!r} "
                       f"(check the user and password in {key})", key=key)
    if isinstance(exc, aiormq.exceptions.InvalidFrameError) and VHOST_CLOSE in str(exc):
        return Refused(f"RabbitMQ at {where} refused vhost {vhost_of(url)!r} to user "
                       f"{unquote(user)!r}: it does not exist, or the user has no permission "
                       f"on it (check the vhost in {key}; `rabbitmqctl list_vhosts`, "
                       "`rabbitmqctl list_user_permissions`)", key=key)
    if isinstance(exc, ValueError):  # the URL itself (yarl's parse): a port that is no number
        password = _password(url)
        text = common.one_line(exc)
        return Refused(f"{key} cannot be used: "
                       f"{text.replace(password, '***') if password else text}", key=key)
    return _tls(exc, where, key)


def _tls(exc: BaseException, where: str, key: str) -> Refused | None:
    """A TLS setting the broker cannot meet: a CA file that is not PEM, a certificate that
    does not verify, TLS to a port that does not speak it."""
    connecting = isinstance(exc, aiormq.exceptions.AMQPConnectionError)  # an OSError too
    if not connecting and isinstance(exc, FileNotFoundError | ssl.SSLError):
        # Raised making the TLS context, before any connection: the CA file.
        return Refused(f"the CA file for RabbitMQ at {where} cannot be used: "
                       f"{_ssl_text(exc)} (check rabbitmq.ca_file)", key="rabbitmq.ca_file")
    cause = exc.__cause__ if connecting else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return Refused(f"RabbitMQ at {where}: its certificate does not verify: "
                       f"{_ssl_text(cause)} (check rabbitmq.ca_file and the host in {key})",
                       key=key)
    if isinstance(cause, ssl.SSLError) and any(word in str(cause) for word in NOT_TLS):
        return Refused(f"RabbitMQ at {where} does not speak TLS on that port: "
                       f"{_ssl_text(cause)} (check the scheme and port in {key}: amqps:// "
                       "needs the broker's TLS port, 5671 by default)", key=key)
    return None


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _ssl_text(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return common.one_line(text)


def describe_connect(exc: BaseException) -> str:
    """A failed connect as one line: aiormq keeps the socket's error as ``(errno, text)``
    args (``AMQPConnectionError: 111`` said nothing), the cause's own words say more."""
    cause = exc.__cause__
    if isinstance(exc, aiormq.exceptions.AMQPConnectionError) and isinstance(cause, OSError):
        return f"{type(cause).__name__}: {common.one_line(cause)}"
    text = common.one_line(exc.args[0] if exc.args else exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def not_declared(exc: BaseException | None) -> bool:
    """True for the NOT_FOUND of a queue that was never declared (``jobq init`` never ran), not
    for the one a cluster answers about a queue whose node is down."""
    return isinstance(exc, aiormq.exceptions.ChannelNotFoundEntity) and not node_down(exc)
