"""A client that connects to the metrics port and never finishes its request (a probe cut off,
a scanner, a half-open link) neither blocks the other scrapes nor the consumer's shutdown."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.integration.test_observability_postgres import consumer
from tests.scrape import get

pytestmark = pytest.mark.integration


def accepted(port: int, client_port: int) -> bool:
    """Whether the server listening on ``port`` has accepted the connection from
    ``client_port``: its end is established and its accept queue is empty (Linux /proc, where
    a listening socket's rx_queue is the length of that queue)."""
    listening, established = None, False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            _, local, remote, state, queues, *_ = line.split()
            if int(local.rsplit(":", 1)[1], 16) != port:
                continue
            if state == "0A":  # LISTEN
                listening = int(queues.split(":")[1], 16)
            elif state == "01" and int(remote.rsplit(":", 1)[1], 16) == client_port:
                established = True
    return established and listening == 0


def test_a_silent_metrics_client_blocks_neither_scrapes_nor_sigterm(schema: str,
                                                                    queue_name: str) -> None:
    running = consumer(schema, queue_name)
    silent = socket.create_connection(("127.0.0.1", running.port), timeout=5)
    try:
        silent.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        # The server has taken the silent connection, before the scrape below is even made.
        assert wait_until(lambda: accepted(running.port, silent.getsockname()[1]), 10)
        started = time.monotonic()
        assert get(f"{running.base}/healthz", timeout=10)[0] == 200
        assert time.monotonic() - started < 2  # served beside the silent one
        started = time.monotonic()
        code = running.stop(timeout=20)
        assert code == 0, "".join(running.lines)
        assert time.monotonic() - started < 8, "".join(running.lines)
    finally:
        silent.close()
