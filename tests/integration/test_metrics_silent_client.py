"""A client that connects to the metrics port and never finishes its request (a probe cut off,
a scanner, a half-open link) neither blocks the other scrapes nor the consumer's shutdown."""

from __future__ import annotations

import socket
import time

import pytest

from tests.integration.test_observability_postgres import consumer
from tests.scrape import get

pytestmark = pytest.mark.integration


def test_a_silent_metrics_client_blocks_neither_scrapes_nor_sigterm(schema: str,
                                                                    queue_name: str) -> None:
    running = consumer(schema, queue_name)
    silent = socket.create_connection(("127.0.0.1", running.port), timeout=5)
    try:
        silent.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        time.sleep(0.2)
        started = time.monotonic()
        assert get(f"{running.base}/healthz", timeout=10)[0] == 200
        assert time.monotonic() - started < 2  # served beside the silent one
        started = time.monotonic()
        code = running.stop(timeout=20)
        assert code == 0, "".join(running.lines)
        assert time.monotonic() - started < 8, "".join(running.lines)
    finally:
        silent.close()
