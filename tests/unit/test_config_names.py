"""Config validation for the reliability settings: limits, and names with quotes or SQL in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobq.config import load_settings
from jobq.core.errors import ConfigError

HOSTILE = ['jobs"; DROP TABLE jobq.jobs; --', "a'b", 'a"b', "x y", "q;", "q\x00", "", "é" * 3,
           "$(rm -rf /)", "a" * 101]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_queue_names_are_refused_naming_the_key(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^command line: queue: bad value|^<defaults>: queue: bad"):
        load_settings(None, {"queue": name}, env={})


@pytest.mark.parametrize("name", [*HOSTILE, "1abc", "with-dash", "with.dot", "a" * 64])
def test_hostile_schema_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"postgres\.schema: bad value .*plain identifier"):
        load_settings(None, {"postgres.schema": name}, env={})


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_from_the_environment_are_refused_too(name: str) -> None:
    with pytest.raises(ConfigError, match=r"rabbitmq\.exchange: bad value"):
        load_settings(None, env={"JOBQ_RABBITMQ__EXCHANGE": name})


def test_plain_names_pass() -> None:
    s = load_settings(None, {"queue": "emails.high-prio_2", "postgres.schema": "jobq_app"}, env={})
    assert (s.queue, s.postgres.schema) == ("emails.high-prio_2", "jobq_app")


def test_limits_defaults_and_bounds() -> None:
    s = load_settings(None, env={})
    assert (s.limits.max_payload, s.limits.max_headers, s.limits.max_pending) == (1_048_576, 65_536, 0)
    s = load_settings(None, env={"JOBQ_LIMITS__MAX_PENDING": "1000", "JOBQ_LIMITS__ENQUEUE_TIMEOUT": "0"})
    assert (s.limits.max_pending, s.limits.enqueue_timeout) == (1000, 0.0)
    for key, value, words in [("limits.max_payload", 0, ">= 1"), ("limits.max_pending", -1, ">= 0"),
                              ("limits.enqueue_timeout", -0.5, ">= 0"),
                              ("limits.max_headers", "big", "expected int")]:
        with pytest.raises(ConfigError, match=f"{key}: .*{words}"):
            load_settings(None, {key: value}, env={})


def test_tls_ca_file_is_checked_and_passed_as_the_url_cafile(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    s = load_settings(None, {"rabbitmq.url": "amqps://u:pw@mq:5671/jobq", "rabbitmq.ca_file": str(ca)},
                      env={})
    assert s.rabbitmq.connect_url == f"amqps://u:pw@mq:5671/jobq?cafile={ca}"
    s = load_settings(None, {"rabbitmq.url": "amqps://mq/?name=x", "rabbitmq.ca_file": str(ca)}, env={})
    assert s.rabbitmq.connect_url == f"amqps://mq/?name=x&cafile={ca}"
    assert load_settings(None, env={}).rabbitmq.connect_url == "amqp://guest:guest@127.0.0.1:5672/"
    with pytest.raises(ConfigError, match=r"rabbitmq\.ca_file: bad value .*existing CA file"):
        load_settings(None, {"rabbitmq.ca_file": str(tmp_path / "missing.pem")}, env={})
    with pytest.raises(ConfigError, match=r"rabbitmq\.ca_file: .*must be amqps://"):
        load_settings(None, {"rabbitmq.ca_file": str(ca)}, env={})


def test_postgres_tls_settings_stay_in_the_dsn_untouched() -> None:
    dsn = "postgresql://u@db/app?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem"
    assert load_settings(None, {"postgres.dsn": dsn}, env={}).postgres.dsn == dsn
