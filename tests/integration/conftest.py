"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract.backends import Backend, rabbit_backend


@pytest.fixture
def rabbit(amqp_url: str, queue_name: str) -> Iterator[Backend]:
    """A RabbitMQ backend on a fresh queue, removed afterwards."""
    backend = rabbit_backend(queue_name)
    try:
        yield backend
    finally:
        backend.cleanup()
