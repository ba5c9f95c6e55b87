"""rabbitmq.urls: a cluster's nodes, tried in turn at connect and reconnect.

One broker stands in for a cluster here, reached at two addresses (a fault proxy, then the
broker itself), with a closed port in front: a consumer starts past the closed node, runs
through the proxy's node until that node goes away, and goes on through the other one; every
job is done, none is lost. The cluster harness (a 3-node cluster, a node killed) is issue 17's.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path

from jobq.config import ConnectConfig
from jobq.transports.rabbitmq.connect import RabbitLink
from tests.conftest import AMQP_URL, wait_until
from tests.contract.backends import rabbit_backend
from tests.faultproxy import FaultProxy
from tests.processors import completions

CLOSED = "amqp://guest:guest@127.0.0.1:1/"


def test_a_link_connects_to_the_first_node_that_answers(amqp_url: str) -> None:
    async def main() -> tuple[str, int]:
        link = RabbitLink([CLOSED, AMQP_URL], ConnectConfig(attempts=1, timeout=2), role="t")
        await link.open()
        try:
            return link.address, link.generation
        finally:
            await link.close()

    address, generation = asyncio.run(main())
    assert address == "127.0.0.1:5672" and generation == 1


def test_a_consumer_rides_out_its_node_going_away(
        amqp_url: str, queue_name: str, tmp_path: Path,
        fault_proxy: Callable[[str, int], FaultProxy]) -> None:
    proxy = fault_proxy("127.0.0.1", 5672)
    urls = [CLOSED, f"amqp://guest:guest@127.0.0.1:{proxy.port}/", AMQP_URL]
    backend = rabbit_backend(queue_name)
    try:
        backend.set(RABBITMQ__URLS=json.dumps(urls))
        backend.produce(3000)
        consumer = backend.start("consumer", "-p", "tests.processors:record", "-a",
                                 f"directory={tmp_path}", "-a", "sleep_ms=2", "-n", "4")
        try:
            assert wait_until(lambda: len(completions(tmp_path)) >= 500, 60)
            assert proxy.connections > 0  # it came through the proxy's node
            proxy.stop()  # that node goes away: its connections reset, its port closed
            assert wait_until(lambda: len(set(completions(tmp_path))) == 3000, 90), \
                len(set(completions(tmp_path)))
        finally:
            consumer.send_signal(signal.SIGTERM)
            _, err = consumer.communicate(timeout=60)
        assert consumer.returncode == 0, err
        assert "RabbitMQ node 127.0.0.1:1 does not answer" in err, err
        assert "connected to RabbitMQ at 127.0.0.1:5672" in err, err  # the other node
        assert backend.waiting() == 0 and backend.dead() == []
    finally:
        backend.cleanup()
