"""Issue 19, item 7: a consumer with no processor refuses to start; producer and jobq need none."""

from __future__ import annotations

import pytest

from jobq.cli.consume import consume
from jobq.config import load_settings
from jobq.core.errors import ConfigError
from tests.conftest import ROOT


@pytest.mark.parametrize("config", ["postgres.yaml", "rabbitmq.yaml"])
async def test_consume_without_a_processor_is_a_config_error_before_connecting(config: str) -> None:
    # An unreachable server with one try: had the check come after connecting, this would be a
    # TransportError (exit 3); before, it connected and settled every job unrun.
    settings = load_settings(ROOT / "configs" / config, {"connect.attempts": 1}, env={
        "JOBQ_PG_DSN": "postgresql://nobody@127.0.0.1:1/x", "JOBQ_AMQP_URL": "amqp://127.0.0.1:1/"})
    assert settings.consumer.processor == "" and not settings.consumer.processors
    with pytest.raises(ConfigError) as raised:
        await consume(settings)
    assert raised.value.key == "consumer.processor"

