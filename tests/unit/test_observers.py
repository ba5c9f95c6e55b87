"""The composition root builds a consumer's observers: the metrics server comes and goes with
the container, whatever happened in between."""

from __future__ import annotations

import inspect
import socket

import pytest

from jobq.wiring.container import Container, get_observers, get_schedules, get_transport, get_worker_pool
from tests.unit.test_conformance import wired


def answers(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def shut_down(container: Container) -> None:
    closing = container.shutdown_resources()
    if inspect.isawaitable(closing):
        await closing


@pytest.mark.parametrize("transport", ["postgres", "rabbitmq"])
async def test_the_metrics_server_serves_until_the_container_shuts_down(transport: str) -> None:
    container = wired(transport, **{"metrics.enabled": True, "metrics.port": 0,
                                    "metrics.host": "127.0.0.1", "consumer.processor": "noop"})
    pool = await get_worker_pool(container)
    await get_transport(container)
    metrics, server, monitor = await get_observers(container)
    assert server is not None
    port = server.server_port
    try:
        assert answers(port)
        assert (await get_observers(container)) == (metrics, server, monitor)  # built once
    finally:
        # As after a start-up that failed past this point: nothing but the container stops it.
        await shut_down(container)
    assert not answers(port)
    assert pool is not None


async def test_without_metrics_there_is_no_server_and_no_depth_probe() -> None:
    container = wired("postgres", **{"metrics.enabled": False, "log.summary_interval": 0,
                                     "consumer.processor": "noop"})
    await get_worker_pool(container)
    _, server, monitor = await get_observers(container)
    assert server is None
    assert monitor._probe is None  # nothing reads the queue's depth that nobody shows
    assert get_schedules(container) == ()
    await shut_down(container)


def test_the_schedules_are_parsed_by_the_root() -> None:
    container = wired("postgres", **{"schedules": {"tick": {"every": "5s", "kind": "t"}}})
    (schedule,) = get_schedules(container)
    assert schedule.name == "tick"
