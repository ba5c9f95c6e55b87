"""Which failures to connect are an operator's mistake (``Refused``: exit 2 at once) and which
are the server being away (retried with backoff, then exit 3); the same for a statement on a
schema that is not ready (``jobq init`` never ran, a grant missing)."""

from __future__ import annotations

import re

import psycopg
from psycopg import conninfo

from jobq.core.errors import ConfigError, Refused
from jobq.transports.common import error_text, one_line

# What PostgreSQL or libpq says when it refuses a connection for a reason retrying cannot mend,
# and what to check. Matched on the text: libpq keeps no SQLSTATE for a failed connection, only
# the server's message. A server that answers in another language (lc_messages) is not
# recognised: its refusals are retried as an unreachable server's, as they always were.
MISTAKES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(pattern), check) for
                                                          pattern, check in (
    (r'role "[^"]*" does not exist', "the user in postgres.dsn"),
    (r'database "[^"]*" does not exist', "the database in postgres.dsn"),
    (r"(password|Peer|Ident|SCRAM|GSSAPI|SSPI|LDAP|RADIUS|certificate) authentication failed",
     "the user and password in postgres.dsn"),
    (r"no password supplied", "postgres.dsn: the server asks for a password (in the DSN, "
                              "PGPASSWORD or ~/.pgpass)"),
    (r"no pg_hba\.conf entry", "the server's pg_hba.conf, or the user, database or sslmode in "
                               "postgres.dsn"),
    (r"permission denied for database|does not have CONNECT privilege",
     "GRANT CONNECT ON DATABASE to the user of postgres.dsn"),
    (r"is not permitted to log in", "ALTER ROLE ... LOGIN, or another user in postgres.dsn"),
    (r"unrecognized configuration parameter|invalid value for parameter",
     "the options in postgres.dsn"),
    (r"server does not support SSL|root certificate file|certificate verify failed|"
     r"could not (read|load) (root )?certificate|could not load private key|does not match "
     r"host name", "the sslmode and ssl* options in postgres.dsn"),
    (r"received invalid response to SSL negotiation|expected authentication request from "
     r"server", "the host and port in postgres.dsn: what answers there is not PostgreSQL"),
))
# libpq refused the options before trying to connect (an unknown option, a port that is not
# a number, two lists of hosts and ports that do not match): always the DSN's fault.
BAD_OPTIONS = "connection is bad: "
# What libpq and psycopg put before the server's own words.
PREAMBLE = re.compile(r'^(connection (failed|is bad): )?(connection to server (at|on socket) '
                      r'"[^"]*"(, port \d+)? failed: )?(FATAL: )?')
# psycopg's text when every host of a DSN failed: one line per host, after this one.
MANY = "Multiple connection attempts failed. All failures were:"
HOST_LINE = re.compile(r"^- host: (None|'[^']*'), port: (None|'[^']*'), hostaddr: (None|'[^']*'): ")
QUOTED = re.compile(r'"([^"]*)"')
NAMES_AN_OPTION = re.compile(r'invalid (URI query parameter:|connection option) "[A-Za-z_]*"$')


def refusal(exc: psycopg.Error, where: str, dsn: str) -> Refused | None:
    """``exc`` (from a connect) as a Refused naming what to check, or None if the server may
    be back later. A DSN with several hosts is refused only if every host refused."""
    if isinstance(exc, psycopg.ProgrammingError):  # a DSN it could not parse
        return unparsable(exc)
    lines = str(exc).splitlines()
    failures = ([HOST_LINE.sub("", line) for line in lines[lines.index(MANY) + 1:]
                 if HOST_LINE.match(line)] if MANY in lines else [str(exc)])
    checks = [_check(" ".join(failure.split())) for failure in failures]
    if not checks or None in checks:
        return None
    detail = PREAMBLE.sub("", one_line(failures[-1]))
    return Refused(f"PostgreSQL at {where} refused the connection: {_masked(detail, dsn)} "
                   f"(check {checks[-1]})", key="postgres.dsn")


def unparsable(exc: psycopg.Error) -> Refused:
    """A DSN psycopg cannot parse, without quoting the DSN: what it quotes may be (part of) a
    password, unless it is the name of an option it does not know."""
    text = error_text(exc)
    if not NAMES_AN_OPTION.match(text):
        names = {opt.keyword.decode() for opt in psycopg.pq.Conninfo.get_defaults()}
        text = QUOTED.sub(lambda m: m.group(0) if m.group(1) in names or not any(
            c.isalnum() for c in m.group(1)) else '"***"', text)
    return Refused(f"postgres.dsn cannot be used: {text}", key="postgres.dsn")


def _check(text: str) -> str | None:
    if text.startswith(BAD_OPTIONS):
        return "postgres.dsn"
    return next((check for pattern, check in MISTAKES if pattern.search(text)), None)


def _masked(text: str, dsn: str) -> str:
    try:
        password = conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return text
    return text.replace(str(password), "***") if password else text


# What a statement's SQLSTATE says about the schema: `jobq init` never ran (or ran for another
# schema or database), or the role lacks a grant. Not a server that is away: exit 2 at once.
NOT_INITIALISED: tuple[type[psycopg.Error], ...] = (psycopg.errors.UndefinedTable,
                                                    psycopg.errors.InvalidSchemaName)
NO_GRANT: tuple[type[psycopg.Error], ...] = (psycopg.errors.InsufficientPrivilege,)


def schema_mistake(exc: BaseException | None, schema: str, dsn: str) -> ConfigError | None:
    """``exc`` (a TransportError's cause) as the ConfigError naming the fix, or None."""
    if not isinstance(exc, NOT_INITIALISED + NO_GRANT):
        return None
    try:
        info = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        info = {}
    # libpq's defaults: the database named as the user, the user as the OS account.
    user = info.get("user")
    database = info.get("dbname") or user
    where = f"database {database!r}" if database else "the database of postgres.dsn"
    said = error_text(exc).split(" LINE ")[0]  # not the statement's text and caret line
    if isinstance(exc, NOT_INITIALISED):
        return ConfigError(f"schema {schema!r} not found, or not complete, in {where} ({said}): "
                           "run `jobq init` with the same config first (it creates or upgrades "
                           "the schema)", key="postgres.schema")
    role = f"role {user!r}" if user else "the role of postgres.dsn"
    return ConfigError(f"{role} lacks a grant in schema {schema!r} of {where} ({said}): grant "
                       "it (docs/security.md lists each role's grants)", key="postgres.dsn")
