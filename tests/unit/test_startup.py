"""A consumer whose connection is cut while it starts tries again instead of exiting 3.

Regression (found by `make chaos`, postgres-transaction): a consumer started while
pg_terminate_backend cut its fresh connections failed its first statement in open() and
exited 3, although the server was up.
"""

from __future__ import annotations

import logging

import pytest

from jobq.config import ConnectConfig
from jobq.core.errors import ConfigError, ConnectionLost
from jobq.transports.memory import MemoryStore, MemoryTransport
from jobq.wiring.startup import open_transport


class FlakyOpen(MemoryTransport):
    def __init__(self, failures: int, error: Exception | None = None) -> None:
        super().__init__(MemoryStore())
        self.failures = failures
        self.error = error or ConnectionLost("postgres sweep: terminating connection due to "
                                             "administrator command")
        self.opens = 0

    async def open(self) -> None:
        self.opens += 1
        if self.opens <= self.failures:
            raise self.error


FAST = ConnectConfig(attempts=3, backoff_base=0.001, backoff_max=0.001)


async def test_a_connection_cut_while_opening_is_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    transport = FlakyOpen(failures=2)
    await open_transport(transport, FAST, logging.getLogger("jobq.test"))
    assert transport.opens == 3
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["could not start consuming"] * 2


async def test_it_gives_up_after_the_configured_attempts_and_never_retries_config_errors() -> None:
    transport = FlakyOpen(failures=5)
    with pytest.raises(ConnectionLost):
        await open_transport(transport, FAST, logging.getLogger("jobq.test"))
    assert transport.opens == 3
    conflict = FlakyOpen(failures=5, error=ConfigError("queue exists with other arguments"))
    with pytest.raises(ConfigError):
        await open_transport(conflict, FAST, logging.getLogger("jobq.test"))
    assert conflict.opens == 1


def test_the_cli_module_imports_next_to_nothing_before_the_consumer_takes_sigterm() -> None:
    """``consumer`` installs its SIGTERM handler as consumer_main's first line; whatever
    ``jobq.cli.main`` imports runs before that, unprotected. It imported the commands (the container,
    psycopg or aio-pika wiring, YAML: ~180 ms), and a SIGTERM in that window killed a just-started
    consumer with -15 instead of exit 0 (seen in the fault suite). Now those load later."""
    import subprocess
    import sys

    probe = ("import sys, jobq.cli.main; print(sorted(m for m in ('jobq.cli.commands', 'jobq.config', "
             "'jobq.wiring.container', 'yaml', 'psycopg', 'aio_pika') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
