"""Routing by kind: per-kind processors, the single processor as the default, unknown kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobq.config import ConsumerConfig, load_settings
from jobq.core.errors import ConfigError
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.worker.pool import WorkerPool
from jobq.worker.retry import RetryPolicy
from jobq.worker.routing import KindRouter, build_handler
from tests.processors import completions

RECORD = "tests.processors:record"


async def drain(store: MemoryStore, consumer: ConsumerConfig) -> None:
    pool = WorkerPool(MemoryTransport(store), build_handler(consumer), RetryPolicy(jitter=False),
                      concurrency=2, buffer_size=2, job_timeout=5.0, shutdown_timeout=5.0,
                      poll_timeout=0.05, once=True)
    await pool.run()


async def test_unknown_kind_without_default_is_dead_lettered_naming_it(tmp_path: Path) -> None:
    store = MemoryStore()
    good = [store.add("email", {}), store.add("email", {})]
    odd = store.add("sms", {})
    later = store.add("email", {})
    consumer = ConsumerConfig(processor="", processors={
        "email": {"processor": RECORD, "args": {"directory": str(tmp_path)}}})
    await drain(store, consumer)
    assert sorted(completions(tmp_path)) == sorted([*good, later])  # the consumer went on
    entry = store.entries[odd]
    assert (entry.status, entry.history) == ("dead", ["dead"])
    assert entry.last_error == ("UnknownKind: no processor for kind 'sms' (known kinds: email; "
                                "no default processor)")


async def test_kinds_go_to_their_processor_and_the_rest_to_the_default(tmp_path: Path) -> None:
    store = MemoryStore()
    email = store.add("email", {})
    other = store.add("sms", {})
    consumer = ConsumerConfig(
        processor=RECORD, processor_args={"directory": str(tmp_path / "default")},
        processors={"email": {"processor": RECORD, "args": {"directory": str(tmp_path / "email")}}})
    await drain(store, consumer)
    assert completions(tmp_path / "email") == [email]
    assert completions(tmp_path / "default") == [other]


async def test_a_single_processor_is_used_as_before_without_a_router() -> None:
    handler = build_handler(ConsumerConfig(processor="noop"))
    assert not isinstance(handler, KindRouter)


def test_routing_config_loads_from_yaml_and_bad_entries_name_the_key(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("consumer:\n  processor: ''\n  processors:\n    email: noop\n"
                    "    report: {processor: sleep, args: {ms: 1}}\n")
    settings = load_settings(good, env={})
    assert isinstance(build_handler(settings.consumer), KindRouter)
    bad = tmp_path / "bad.yaml"
    bad.write_text("consumer:\n  processors:\n    email: {proc: noop}\n")
    with pytest.raises(ConfigError, match=r"consumer\.processors: bad value"):
        load_settings(bad, env={})
    with pytest.raises(ConfigError, match=r"consumer\.processors\.email: .*unknown processor 'nope'"):
        build_handler(ConsumerConfig(processors={"email": "nope"}))
    with pytest.raises(ConfigError, match=r"consumer\.processor: no processor"):
        build_handler(ConsumerConfig(processor=""))
