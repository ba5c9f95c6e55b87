"""NewJob.priority where it cannot hold: the refusal names the key and nothing is enqueued.

That a higher priority runs first, on every backend that has priorities, is the port contract's
(tests/contract/test_port.py, ``test_a_higher_priority_comes_first``).
"""

from __future__ import annotations

from tests.conftest import schema_env
from tests.contract.backends import Backend


def test_where_priorities_cannot_hold_the_refusal_names_the_key(queue_name: str,
                                                               amqp_url: str) -> None:
    quorum = Backend("rabbitmq", queue_name, schema_env("unused", JOBQ_RABBITMQ__MAX_PRIORITY="5"))
    result = quorum.run("jobq", "init")
    assert result.returncode == 2, result.stderr
    assert "rabbitmq.max_priority" in result.stderr and "classic" in result.stderr
    plain = Backend("rabbitmq", queue_name, schema_env("unused"))
    try:
        assert plain.run("jobq", "init").returncode == 0
        result = plain.run("producer", "--count", "3", "--priority", "2")
        assert result.returncode == 2, result.stderr
        assert "rabbitmq.max_priority" in result.stderr and "nothing was enqueued" in result.stderr
        assert plain.waiting() == 0
        result = plain.run("producer", "--count", "1", "--priority", "12")
        assert result.returncode == 2 and "0-9" in result.stderr
    finally:
        plain.cleanup()
