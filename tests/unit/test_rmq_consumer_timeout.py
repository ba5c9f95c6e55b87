"""The consumer checks the broker's consumer_timeout against its own settings at start."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jobq.config import ConnectConfig, RabbitConfig, load_settings
from jobq.core.errors import ConfigError
from jobq.transports.rabbitmq.acktimeout import consumer_timeout_warning, worst_hold
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.wiring.derived import rmq_prefetch


def test_a_delivery_waits_behind_a_full_prefetch_then_runs() -> None:
    assert worst_hold(job_timeout=300, prefetch=64, concurrency=32) == 600
    assert worst_hold(job_timeout=300, prefetch=65, concurrency=32) == 900
    assert worst_hold(job_timeout=10, prefetch=1, concurrency=32) == 10


def test_the_defaults_fit_the_broker_default() -> None:
    settings = load_settings(None, {"transport": "rabbitmq"}, env={})
    assert settings.rabbitmq.consumer_timeout == 1800
    assert consumer_timeout_warning(
        consumer_timeout=settings.rabbitmq.consumer_timeout,
        job_timeout=settings.consumer.job_timeout, prefetch=rmq_prefetch(settings),
        concurrency=settings.consumer.concurrency) is None


def test_a_delivery_that_can_outlive_the_broker_timeout_names_the_keys_to_change() -> None:
    warning = consumer_timeout_warning(consumer_timeout=1800, job_timeout=900, prefetch=64,
                                       concurrency=32)
    assert warning is not None and warning.startswith(
        "a delivery can stay unacked up to 1800s (2 x consumer.job_timeout 900s: prefetch 64 on "
        "concurrency 32), at or over the broker's consumer_timeout (1800s, rabbitmq.consumer_timeout)")
    for key in ("consumer.job_timeout", "consumer.buffer", "rabbitmq.prefetch", "rabbitmq.conf"):
        assert key in warning
    assert "consumer.job_timeout" in (consumer_timeout_warning(
        consumer_timeout=1800, job_timeout=None, prefetch=1, concurrency=1) or "")
    assert consumer_timeout_warning(consumer_timeout=0, job_timeout=None, prefetch=64,
                                    concurrency=1) is None  # the broker enforces none


def test_a_negative_consumer_timeout_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"rabbitmq\.consumer_timeout: bad value -1"):
        load_settings(None, {"rabbitmq.consumer_timeout": -1}, env={})


async def test_the_consumer_says_it_at_start(caplog: pytest.LogCaptureFixture) -> None:
    link = RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")
    transport = RabbitTransport(link, RabbitConfig(consumer_timeout=60), queue="q", prefetch=8,
                                max_attempts=3, job_timeout=30, concurrency=4)

    async def started(*_: Any) -> None:
        raise RuntimeError("no broker here")

    transport._sessions.start = started  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, "jobq.rabbitmq"), pytest.raises(RuntimeError):
        await transport.open()
    assert [r.getMessage()[:47] for r in caplog.records] == [
        "a delivery can stay unacked up to 60s (2 x cons"]
