"""RabbitMQ topology under limits.max_pending: a bounded work queue, tiers that never drop."""

from __future__ import annotations

import aiormq

from jobq.config import RabbitConfig
from jobq.transports.rabbitmq.topology import Topology, explain_conflict


def test_max_pending_bounds_the_work_queue() -> None:
    t = Topology.configured(RabbitConfig(delivery_limit=7, queue_type="classic"), "emails",
                            max_pending=1000)
    assert t.work_arguments() == {"x-queue-type": "classic", "x-dead-letter-exchange": "emails.dlx",
                                  "x-max-length": 1000, "x-overflow": "reject-publish"}
    assert t.tier_arguments(5) == {
        "x-queue-type": "quorum", "x-message-ttl": 5000, "x-dead-letter-exchange": "jobq",
        "x-dead-letter-routing-key": "emails", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish"}
    unbounded = Topology.configured(RabbitConfig(queue_type="classic"), "emails")
    assert "x-max-length" not in unbounded.work_arguments()


def test_turning_max_pending_on_for_an_existing_queue_names_the_setting() -> None:
    err = explain_conflict(aiormq.exceptions.ChannelPreconditionFailed(
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'emails' in vhost '/': "
        "received the value '1000' of type 'signedint' but current is none"))
    assert err.key == "limits.max_pending" and "rabbitmqctl delete_queue emails" in str(err)


def test_an_old_classic_retry_tier_gets_a_remedy_of_its_own() -> None:
    err = explain_conflict(aiormq.exceptions.ChannelPreconditionFailed(
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'emails.retry.5' in "
        "vhost '/': received 'quorum' but current is 'classic'"))
    assert err.key == "rabbitmq.retry_tiers"
    assert "once it is empty" in str(err) and "rabbitmqctl delete_queue emails.retry.5" in str(err)


def test_the_dead_queue_is_classic_whatever_the_work_queue_is() -> None:
    # A quorum <q>.dead loses a dead letter after ~20 `jobq dead list` on RabbitMQ 4.0-4.2
    # (the default delivery limit counts each return of the walk); a classic one has no limit.
    quorum = Topology.configured(RabbitConfig(), "emails")
    assert quorum.queue_type == "quorum" and quorum.dead_arguments() == {"x-queue-type": "classic"}
    kept = Topology.configured(RabbitConfig(dead_queue_type="quorum"), "emails")
    assert kept.dead_arguments() == {"x-queue-type": "quorum"}


def test_a_quorum_dead_queue_from_an_older_jobq_names_the_setting_that_keeps_it() -> None:
    err = explain_conflict(aiormq.exceptions.ChannelPreconditionFailed(
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'emails.dead' in vhost "
        "'/': received 'classic' but current is 'quorum'"))
    assert err.key == "rabbitmq.dead_queue_type"
    assert "set rabbitmq.dead_queue_type: quorum to keep it" in str(err)
    assert "docs/rabbitmq-versions.md" in str(err)
