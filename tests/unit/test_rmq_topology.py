"""RabbitMQ topology: names, retry tier choice, arguments, readable declare conflicts."""

from __future__ import annotations

import aiormq
import pytest

from jobq.config import RabbitConfig
from jobq.core.errors import ConfigError
from jobq.transports.rabbitmq.connect import server_address
from jobq.transports.rabbitmq.topology import Topology, explain_conflict


def topology(**kw: object) -> Topology:
    return Topology.configured(RabbitConfig(**kw), "emails")  # type: ignore[arg-type]


def test_names_follow_the_queue() -> None:
    t = topology(retry_tiers=[30, 1, 5, 1])
    assert (t.dlx, t.dead) == ("emails.dlx", "emails.dead")
    assert t.tiers == (1.0, 5.0, 30.0)
    assert [t.tier_name(d) for d in (0.5, 1, 30)] == [
        "emails.retry.0.5", "emails.retry.1", "emails.retry.30"]


@pytest.mark.parametrize(("wait", "tier"), [
    (0.0, None), (0.3, None), (1.0, "emails.retry.1"), (1.2, "emails.retry.1"),
    (4.96, "emails.retry.5"), (29.7, "emails.retry.5"),
    (29.9, "emails.retry.30"), (3600.0, "emails.retry.30"),
])
def test_a_wait_hops_to_the_longest_tier_not_longer_than_it(wait: float, tier: str | None) -> None:
    assert topology(retry_tiers=[1, 5, 30]).hop(wait) == tier


def test_arguments() -> None:
    quorum = topology(delivery_limit=7)
    assert quorum.work_arguments() == {"x-queue-type": "quorum", "x-delivery-limit": 7,
                                       "x-dead-letter-exchange": "emails.dlx",
                                       "x-dead-letter-strategy": "at-least-once",
                                       "x-overflow": "reject-publish"}
    classic = topology(queue_type="classic", delivery_limit=7)
    assert classic.work_arguments() == {"x-queue-type": "classic",
                                        "x-dead-letter-exchange": "emails.dlx"}
    # Tiers dead-letter at least once (quorum) whatever the work queue: a classic tier dropped
    # retries that expired while the work queue was unavailable (broker restart).
    for t in (quorum, classic):
        assert t.tier_arguments(0.25) == {
            "x-queue-type": "quorum", "x-message-ttl": 250, "x-dead-letter-exchange": "jobq",
            "x-dead-letter-routing-key": "emails", "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish"}


def failed(text: str) -> ConfigError:
    return explain_conflict(aiormq.exceptions.ChannelPreconditionFailed(text))


def test_a_queue_conflict_names_the_argument_the_key_and_the_fix() -> None:
    err = failed("PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'emails' in "
                 "vhost '/': received 'classic' but current is 'quorum'")
    assert err.key == "rabbitmq.queue_type"
    text = str(err)
    assert "x-queue-type = 'quorum'" in text and "x-queue-type = 'classic'" in text
    assert "rabbitmqctl delete_queue emails" in text and "jobq init" in text


def test_an_exchange_conflict_and_an_unknown_one() -> None:
    err = failed("PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'jobq' in vhost "
                 "'/': received 'direct' but current is 'fanout'")
    assert err.key == "rabbitmq.exchange" and "another exchange name" in str(err)
    other = failed("PRECONDITION_FAILED - something new")
    assert "something new" in str(other)


def test_server_address_never_shows_credentials() -> None:
    assert server_address("amqp://user:s3cret@mq.example:5673/vh") == "mq.example:5673"
    assert server_address("amqps://user:s3cret@mq.example/") == "mq.example:5671"
    assert server_address("amqp://localhost") == "localhost:5672"
