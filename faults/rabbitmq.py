"""The fault suite's RabbitMQ backend (quorum or classic work queue) on a queue of its own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import aio_pika

from faults.backend import (
    BIN,
    ROOT,
    FinalState,
    Options,
    base_env,
    enqueue_numbered,
    record_args,
    wait_tcp,
)
from jobq.config import load_settings

AMQP_URL = os.environ.get("JOBQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
TIERS = (1.0, 5.0, 30.0, 300.0)


def rabbitmqctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run rabbitmqctl (quietly)."""
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout)


class RabbitBackend:
    """RabbitMQ with a quorum or classic work queue."""

    def __init__(self, queue_type: str = "quorum", url: str = AMQP_URL) -> None:
        self.name = f"rabbitmq-{queue_type}"
        self.queue_type = queue_type
        self.url = url
        self.queue = f"chaos-{queue_type}-{uuid.uuid4().hex[:8]}"
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 5672
        self._config = ["--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--queue", self.queue]

    def _env(self) -> dict[str, str]:
        return base_env(JOBQ_AMQP_URL=self.url, JOBQ_RABBITMQ__QUEUE_TYPE=self.queue_type,
                        JOBQ_CONNECT__ATTEMPTS="40", JOBQ_CONNECT__BACKOFF_BASE="0.2",
                        JOBQ_CONNECT__BACKOFF_MAX="2")

    def _jobq(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(BIN / "jobq"), args[0], *self._config, *args[1:]],
                              env=self._env(), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"jobq {' '.join(args)} failed: {done.stderr}")
        return done

    def setup(self) -> None:
        """Declare the topology with `jobq init`."""
        self._jobq("init")

    def consumer_command(self, record_dir: Path, options: Options) -> tuple[list[str], dict[str, str]]:
        """The consumer command line and environment."""
        return [str(BIN / "consumer"), *self._config, *record_args(record_dir, options)], self._env()

    async def enqueue(self, count: int) -> list[str]:
        """Enqueue ``count`` jobs through the Python API (confirmed); the ids are the record."""
        settings = load_settings(ROOT / "configs" / "rabbitmq.yaml", {
            "rabbitmq.url": self.url, "rabbitmq.queue_type": self.queue_type, "queue": self.queue,
            "log.level": "warning"}, env={})
        return await enqueue_numbered(settings, count)

    def _messages(self) -> int | None:
        """Messages (ready + unacknowledged) in the work queue and its retry tiers."""
        listed = rabbitmqctl("list_queues", "-q", "--no-table-headers", "name", "messages", timeout=30)
        if listed.returncode != 0:
            return None
        total = 0
        for line in listed.stdout.splitlines():
            name, _, count = line.rpartition("\t")
            if name == self.queue or name.startswith(f"{self.queue}.retry."):
                total += int(count)
        return total

    async def _ready(self) -> int:
        connection = await aio_pika.connect(self.url, timeout=5)
        async with connection:
            channel = await connection.channel()
            total = 0
            for name in (self.queue, *(f"{self.queue}.retry.{t:g}" for t in TIERS)):
                queue = await channel.declare_queue(name, passive=True)
                total += queue.declaration_result.message_count or 0
            return total

    def remaining(self) -> int | None:
        """Messages not yet done or dead; None while the broker does not answer.

        Ready counts come cheaply over AMQP; only when they reach 0 does rabbitmqctl (slow)
        say whether unacknowledged ones are left.
        """
        try:
            ready = asyncio.run(self._ready())
        except Exception:  # the broker is restarting: unknown for now
            return None
        return ready if ready else self._messages()

    def restart_server(self) -> None:
        """`rabbitmqctl stop_app; rabbitmqctl start_app`."""
        try:
            rabbitmqctl("stop_app")
        finally:
            rabbitmqctl("start_app")
        wait_tcp(self.host, self.port, 60)

    def disrupt(self) -> int:
        """Nothing: connection cuts are the Postgres fault (the broker restart covers RabbitMQ)."""
        return 0

    def final_state(self) -> FinalState:
        """Dead jobs from `jobq dead list`; whatever is still queued is unfinished."""
        state = FinalState()
        dead = json.loads(self._jobq("dead", "list", "--json", "--limit", "1000000").stdout)
        state.dead = {str(row["id"]): str(row.get("last_error")) for row in dead}
        state.unfinished = self._messages() or 0
        return state

    def ensure_up(self) -> None:
        """Start the app again if a restart left it stopped."""
        if not wait_tcp(self.host, self.port, 10):
            rabbitmqctl("start_app")
            wait_tcp(self.host, self.port, 60)

    def cleanup(self) -> None:
        """Delete the queues and the dead-letter exchange of the run's queue."""
        asyncio.run(self._drop())

    async def _drop(self) -> None:
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            for name in (self.queue, f"{self.queue}.dead", *(f"{self.queue}.retry.{t:g}" for t in TIERS)):
                await channel.queue_delete(name)
            await channel.exchange_delete(f"{self.queue}.dlx")
