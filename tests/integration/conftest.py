"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import schema_env
from tests.contract.backends import Backend, rabbit_backend


@pytest.fixture
def rabbit(amqp_url: str, queue_name: str) -> Iterator[Backend]:
    """A RabbitMQ backend on a fresh queue, removed afterwards."""
    backend = rabbit_backend(queue_name)
    try:
        yield backend
    finally:
        backend.cleanup()


@pytest.fixture
def both(schema: str, queue_name: str, amqp_url: str) -> Iterator[tuple[Backend, Backend]]:
    """One queue name on PostgreSQL (a fresh schema) and on RabbitMQ (declared by `jobq init`,
    removed afterwards), sharing one environment: the relay's and the move's two ends."""
    env = schema_env(schema)
    pg = Backend("postgres", queue_name, dict(env), schema=schema)
    rabbit = Backend("rabbitmq", queue_name, dict(env))
    try:
        assert rabbit.run("jobq", "init").returncode == 0
        yield pg, rabbit
    finally:
        rabbit.cleanup()
