"""The mistake/unreachable split at connect, on the drivers' own errors (no server needed; the
real servers' answers are in tests/integration/test_operator_errors.py)."""

from __future__ import annotations

import ssl

import aiormq
import psycopg
import pytest

from jobq.config import load_settings
from jobq.core.errors import ConfigError, Refused
from jobq.transports.postgres.refusals import refusal, schema_mistake, unparsable
from jobq.transports.rabbitmq import refusals as amqp

ROLE = ('connection failed: connection to server at "10.0.0.1", port 5432 failed: FATAL:  '
        'role "x" does not exist')
DOWN = ('connection failed: connection to server at "10.0.0.2", port 5432 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?")


def many(*failures: str) -> psycopg.OperationalError:
    """psycopg's error when every host of a multi-host DSN failed."""
    lines = [failures[-1], "Multiple connection attempts failed. All failures were:"]
    lines += [f"- host: '10.0.0.{i}', port: '5432', hostaddr: '10.0.0.{i}': {text}"
              for i, text in enumerate(failures, 1)]
    return psycopg.OperationalError("\n".join(lines))


def test_a_refusal_names_what_to_check_and_masks_the_password() -> None:
    found = refusal(psycopg.OperationalError(ROLE.replace('"x"', '"hunter2"')), "h:5432",
                    "postgresql://hunter2:hunter2@h/db")
    assert isinstance(found, Refused) and found.key == "postgres.dsn"
    assert str(found) == ('PostgreSQL at h:5432 refused the connection: role "***" does not '
                          "exist (check the user in postgres.dsn)")


def test_a_server_that_is_away_is_no_refusal() -> None:
    for text in (DOWN, "connection timeout expired", "failed to resolve host 'x'",
                 'connection failed: ... failed: FATAL:  the database system is starting up',
                 'connection failed: ... failed: FATAL:  sorry, too many clients already'):
        assert refusal(psycopg.OperationalError(text), "h:5432", "host=h") is None, text


def test_several_hosts_are_a_refusal_only_if_every_one_refused() -> None:
    assert refusal(many(ROLE, DOWN), "h", "host=a,b") is None  # the other may come back
    found = refusal(many(ROLE, ROLE), "h", "host=a,b")
    assert found is not None and 'role "x" does not exist' in str(found)


@pytest.mark.parametrize(("dsn", "shown", "hidden"), [
    ("postgresql://u:pw@h/db?foo=bar", 'invalid URI query parameter: "foo"', "pw"),
    ("host=h password=two words", 'missing "=" after "***"', "words"),
])
def test_a_dsn_that_cannot_be_parsed_never_shows_a_password(dsn: str, shown: str,
                                                             hidden: str) -> None:
    with pytest.raises(psycopg.ProgrammingError) as info:
        psycopg.conninfo.conninfo_to_dict(dsn)
    text = str(unparsable(info.value))
    assert shown in text and hidden not in text and text.startswith("postgres.dsn cannot be used")


def test_a_missing_schema_says_run_jobq_init_and_a_missing_grant_names_the_role() -> None:
    missing = schema_mistake(psycopg.errors.UndefinedTable('relation "s.jobs" does not exist\n'
                                                           "LINE 6: FROM ..."), "s",
                             "postgresql://bob@h/shop")
    assert isinstance(missing, ConfigError) and missing.key == "postgres.schema"
    assert "database 'shop'" in str(missing) and "run `jobq init`" in str(missing)
    assert "LINE 6" not in str(missing)
    denied = schema_mistake(psycopg.errors.InsufficientPrivilege("permission denied for schema s"),
                            "s", "postgresql://bob@h/shop")
    assert denied is not None and "role 'bob'" in str(denied) and denied.key == "postgres.dsn"
    assert schema_mistake(psycopg.errors.QueryCanceled("x"), "s", "") is None


def test_rabbitmq_refusals_and_the_broker_being_away() -> None:
    url = "amqp://bob:hunter2@h:5672/shop%2Fa"
    vhost = aiormq.exceptions.InvalidFrameError(
        "Expected one of ['Connection.OpenOk'], got <Connection.Close object at 0x1>")
    login = aiormq.exceptions.ProbableAuthenticationError("ACCESS_REFUSED - Login was refused")
    tls = aiormq.exceptions.AMQPConnectionError(1, "wrong version")
    tls.__cause__ = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    refused = aiormq.exceptions.AMQPConnectionError(111, "Connect call failed")
    refused.__cause__ = ConnectionRefusedError(111, "Connect call failed ('h', 5672)")
    said = {name: amqp.refusal(exc, url, "h:5672", "rabbitmq.url") for name, exc in (
        ("vhost", vhost), ("login", login), ("tls", tls), ("down", refused),
        ("ca", ssl.SSLError(136, "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate")),
        ("url", ValueError("Invalid URL: port can't be converted to integer")))}
    assert "vhost 'shop/a' to user 'bob'" in str(said["vhost"])
    assert "refused the login of user 'bob'" in str(said["login"])
    assert "does not speak TLS" in str(said["tls"])
    assert said["down"] is None
    assert said["ca"] is not None and said["ca"].key == "rabbitmq.ca_file"
    assert said["url"] is not None and str(said["url"]).startswith("rabbitmq.url cannot be used")
    assert all("hunter2" not in str(value) for value in said.values())
    assert amqp.describe_connect(refused) == ("ConnectionRefusedError: [Errno 111] Connect call "
                                              "failed ('h', 5672)")


def test_an_environment_variable_is_named_in_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"JOBQ_RETRY__MAX_ATTEMPTS": "many"})
    assert str(info.value).startswith("environment variable JOBQ_RETRY__MAX_ATTEMPTS: "
                                      "retry.max_attempts: expected int")
