"""postgres.retention as config: durations, nulls, errors naming the key; what `jobq prune` prunes."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobq.cli.commands import prune_ages
from jobq.config import load_settings
from jobq.core.durations import format_duration, parse_duration
from jobq.core.errors import ConfigError
from jobq.wiring.derived import pg_pool_size


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("15m", 900), ("12h", 43_200), ("1d", 86_400), ("14d", 1_209_600),
    ("90", 90), (90, 90), (1.5, 1.5), ("0.5s", 0.5), (" 2 h ", 7200), ("36500d", 36500 * 86400)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "s", "1w", "1d12h", "-1s", "0", 0, -5, "1e3", "nan",
                                 float("inf"), True, None, [1], "36501d"])
def test_bad_durations_say_what_is_expected(bad: object) -> None:
    with pytest.raises(ValueError, match="expected a duration like 30s, 15m, 12h, 1d, 14d"):
        parse_duration(bad)


@pytest.mark.parametrize(("seconds", "text"), [
    (86_400, "1d"), (1_209_600, "14d"), (3600, "1h"), (90, "90s"), (120, "2m"), (0.5, "0.5s"),
    (5400, "90m")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_retention_defaults_keep_everything_for_ever() -> None:
    retention = load_settings(None, env={}).postgres.retention
    assert (retention.done, retention.dead, retention.enabled) == (None, None, False)
    assert (retention.interval, retention.batch) == (60.0, 1000)


def test_retention_from_yaml_env_and_nulls(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("postgres:\n  retention: {done: 1d, dead: 14d, interval: 5m}\n")
    retention = load_settings(path, env={}).postgres.retention
    assert (retention.of("done"), retention.of("dead"), retention.interval) == (86400, 1209600, 300)
    # A null from the environment (text, as ${VAR:null} gives it too) keeps that state for ever.
    retention = load_settings(path, env={"JOBQ_POSTGRES__RETENTION__DEAD": "null"}).postgres.retention
    assert (retention.done, retention.dead, retention.enabled) == (86400, None, True)
    path.write_text("postgres:\n  retention:\n")  # an empty mapping: the defaults
    assert load_settings(path, env={}).postgres.retention.enabled is False
    path.write_text("postgres:\n  retention: {done: '${DONE:~}'}\n")
    assert load_settings(path, env={}).postgres.retention.done is None
    assert load_settings(path, env={"DONE": "3600"}).postgres.retention.done == 3600


@pytest.mark.parametrize(("text", "key", "words"), [
    ("{done: 1 week}", "postgres.retention.done", "expected a duration"),
    ("{dead: 0}", "postgres.retention.dead", "more than 0"),
    ("{dead: off}", "postgres.retention.dead", "got False"),
    ("{done: [1]}", "postgres.retention.done", "expected a duration"),
    ("{interval: null}", "postgres.retention.interval", "expected a duration"),
    ("{batch: 0}", "postgres.retention.batch", "between 1 and 100000"),
    ("{keep: 1d}", "postgres.retention.keep", "unknown key"),
    ("14d", "postgres.retention", "expected a mapping")])
def test_bad_retention_names_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"postgres:\n  retention: {text}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    assert str(info.value).startswith(f"{path}:2: {key}: ") and words in str(info.value)


def test_the_pruner_gets_a_connection_of_its_own() -> None:
    for claim, size in (("lease", 4), ("transaction", 10)):
        base = {"postgres.claim": claim, "consumer.concurrency": 8}
        assert pg_pool_size(load_settings(None, base, env={})) == size
        pruning = load_settings(None, {**base, "postgres.retention.dead": "1d"}, env={})
        assert pg_pool_size(pruning) == size + 1


def test_what_jobq_prune_prunes() -> None:
    pg = load_settings(None, {"postgres.retention.done": "1d"}, env={})
    assert prune_ages(pg, None, None) == {"done": 86400}  # dead has no retention: not pruned
    assert prune_ages(pg, None, 60) == {"done": 60, "dead": 60}
    assert prune_ages(pg, "dead", 60) == {"dead": 60}
    with pytest.raises(ConfigError, match=r"^--older-than: neither --older-than nor "
                                          r"postgres\.retention\.dead is set"):
        prune_ages(pg, "dead", None)
    with pytest.raises(ConfigError, match=r"postgres\.retention\.done nor postgres.retention.dead"):
        prune_ages(load_settings(None, env={}), None, None)
    rmq = load_settings(None, {"transport": "rabbitmq", "postgres.retention.dead": "1d"}, env={})
    assert prune_ages(rmq, None, 60) == prune_ages(rmq, "dead", 60) == {"dead": 60}
    with pytest.raises(ConfigError, match=r"^--older-than: RabbitMQ has no retention setting"):
        prune_ages(rmq, None, None)  # postgres.retention is PostgreSQL's
    with pytest.raises(ConfigError, match=r"^--state: RabbitMQ keeps no done jobs"):
        prune_ages(rmq, "done", 60)
