"""Config: YAML + extends + ${VAR:default} + env + CLI, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobq.config import load_settings, redact
from jobq.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_configs_load() -> None:
    pg = load_settings(ROOT / "configs" / "postgres.yaml", env={})
    rmq = load_settings(ROOT / "configs" / "rabbitmq.yaml", env={})
    assert pg.transport == "postgres" and rmq.transport == "rabbitmq"
    assert pg.consumer.concurrency == 32 and pg.retry.max_attempts == 5


def test_precedence_defaults_file_env_cli(tmp_path: Path) -> None:
    base = write(tmp_path, "consumer: {concurrency: 4, shutdown_timeout: 9}\n", "base.yaml")
    top = write(tmp_path, f"extends: {base.name}\nconsumer: {{concurrency: 6}}\nqueue: ${{Q:dflt}}\n")
    s = load_settings(top, env={})
    assert (s.consumer.concurrency, s.consumer.shutdown_timeout, s.queue) == (6, 9.0, "dflt")
    s = load_settings(top, env={"Q": "emails", "JOBQ_CONSUMER__CONCURRENCY": "8"})
    assert (s.consumer.concurrency, s.queue) == (8, "emails")
    s = load_settings(top, {"consumer.concurrency": 10}, env={"JOBQ_CONSUMER__CONCURRENCY": "8"})
    assert s.consumer.concurrency == 10


def test_whole_value_interpolation_keeps_the_type(tmp_path: Path) -> None:
    path = write(tmp_path, "consumer: {concurrency: '${N:12}', once: '${ONCE:false}'}\n")
    s = load_settings(path, env={"ONCE": "true"})
    assert s.consumer.concurrency == 12 and s.consumer.once is True


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("consumer: {concurency: 3}\n", "consumer.concurency", "unknown key"),
        ("consumer: {concurrency: many}\n", "consumer.concurrency", "expected int"),
        ("consumer: {concurrency: 0}\n", "consumer.concurrency", "between 1 and 10000"),
        ("transport: kafka\n", "transport", "must be one of"),
        ("postgres: {schema: 'x; DROP TABLE y'}\n", "postgres.schema", "plain identifier"),
        ("queue: 'a\"b'\n", "queue", "bad value"),
        ("retry: {max_attempts: true}\n", "retry.max_attempts", "expected int"),
        ("queue: ${NOPE}\n", "queue", "NOPE is not set"),
    ],
)
def test_bad_values_name_the_key_and_the_file(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    message = str(info.value)
    assert message.startswith(f"{path}:1: {key}: ") and words in message  # its line too


def test_bad_dsn_never_shows_its_password(tmp_path: Path) -> None:
    path = write(tmp_path, "postgres: {dsn: 'mysql://u:hunter2@h/db'}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert "hunter2" not in str(info.value) and "postgres.dsn" in str(info.value)


def test_redact_hides_passwords_in_urls_and_key_value_dsns() -> None:
    assert redact("amqp://guest:secret@h:5672/") == "amqp://guest:***@h:5672/"
    assert redact("host=h password=secret user=u") == "host=h password=*** user=u"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    settings = load_settings(None, {"postgres.dsn": "postgresql://u:s3cr3t@h/db"}, env={})
    assert "s3cr3t" not in repr(settings)


def test_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", env={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "consumer: [unclosed\n"), env={})


def test_a_secret_from_the_environment_stays_text_and_is_never_shown() -> None:
    from jobq.config import load_settings

    settings = load_settings(None, env={"JOBQ_DASHBOARD__TOKEN": "123456"})
    assert settings.dashboard.token == "123456"  # before: parsed as an int, refused, printed
    settings = load_settings(None, env={"JOBQ_DASHBOARD__TOKEN": "yes"})
    assert settings.dashboard.token == "yes"
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"dashboard.token": 424242})
    assert "424242" not in str(refused.value)


def test_a_key_given_twice_names_both_lines_and_a_merge_key_is_no_duplicate(tmp_path: Path) -> None:
    path = write(tmp_path, "consumer:\n  concurrency: 3\n  buffer: 1\n  concurrency: 4\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert str(info.value).startswith(f"{path}:4: consumer.concurrency: duplicate key (also at "
                                      "line 2)")
    path = write(tmp_path, "retry: &r {max_attempts: 3}\nconsumer: {concurrency: 2}\n"
                           "limits:\n  <<: {max_pending: 1}\n  max_pending: 2\n")
    assert load_settings(path, env={}).limits.max_pending == 2


def test_yaml_that_is_not_valid_names_the_line_and_column_without_quoting_it(tmp_path: Path) -> None:
    path = write(tmp_path, "postgres:\n  dsn: 'postgresql://u:hunter2@h/db\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert str(info.value).startswith(f"{path}:3:1: not valid YAML: ")
    assert "hunter2" not in str(info.value)
