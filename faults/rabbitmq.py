"""The fault suite's RabbitMQ backend (quorum or classic work queue) on a queue of its own.

Every check reads the broker's own state: queue counters from `rabbitmqctl list_queues` (its
exit code checked, the run's queues required in the listing), ids by walking the queues. A
read that fails fails the run; it never counts as "nothing there".
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import aio_pika

from faults import servers
from faults.backend import (
    BIN,
    ROOT,
    Cut,
    FinalState,
    Options,
    base_env,
    enqueue_numbered,
    record_args,
    wait_tcp,
)
from jobq.config import load_settings

AMQP_URL = os.environ.get("JOBQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
COUNTERS = ("messages", "messages_ready", "messages_unacknowledged")
CONNECTION_NAME = re.compile(r'\{"connection_name","([^"]*)"\}')


def rabbitmqctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run rabbitmqctl (quietly)."""
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout)


def rabbitmqctl_rows(*args: str, timeout: float = 60) -> list[list[str]]:
    """The tab-separated rows of a rabbitmqctl listing; RuntimeError when it fails."""
    try:
        done = rabbitmqctl(*args, "-q", "--no-table-headers", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: no answer in {timeout:g}s") from exc
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed (exit {done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return [line.split("\t") for line in done.stdout.splitlines() if line.strip()]


class RabbitBackend:
    """RabbitMQ with a quorum or classic work queue."""

    def __init__(self, queue_type: str = "quorum", url: str = AMQP_URL, node: str | None = None
                 ) -> None:
        self.name = f"rabbitmq-{queue_type}"
        self.queue_type = queue_type
        self.url = url
        self.node = node  # rabbitmqctl -n: the node the broker's counters are read from
        self.queue = f"chaos-{queue_type}-{uuid.uuid4().hex[:8]}"
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 5672
        self.vhost = unquote(parts.path[1:]) or "/"
        self._config = ["--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--queue", self.queue]
        tiers = load_settings(ROOT / "configs" / "rabbitmq.yaml", env={}).rabbitmq.retry_tiers
        # The work queue, its crash copies waiting to run alone, and its retry tiers.
        self.work = (self.queue, f"{self.queue}.alone", *(f"{self.queue}.retry.{t:g}" for t in tiers))
        self.dead = f"{self.queue}.dead"

    def _on_node(self) -> tuple[str, ...]:
        """rabbitmqctl's flag for the node to ask (none: the machine's own node)."""
        return ("-n", self.node) if self.node else ()

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

    def consumer_command(self, record_dir: Path, options: Options, index: int
                         ) -> tuple[list[str], dict[str, str]]:
        """The consumer command line and environment (the same for every ``index``)."""
        return [str(BIN / "consumer"), *self._config, *record_args(record_dir, options)], self._env()

    async def enqueue(self, count: int) -> list[str]:
        """Enqueue ``count`` jobs through the Python API (confirmed); the ids are the record."""
        settings = load_settings(ROOT / "configs" / "rabbitmq.yaml", {
            "rabbitmq.url": self.url, "rabbitmq.queue_type": self.queue_type, "queue": self.queue,
            "log.level": "warning"}, env={})
        return await enqueue_numbered(settings, count)

    def _counters(self) -> dict[str, dict[str, int]]:
        """The broker's counters for each of the run's queues; RuntimeError if it cannot say."""
        rows = rabbitmqctl_rows(*self._on_node(), "list_queues", "-p", self.vhost, "name",
                                *COUNTERS)
        ours = {row[0]: dict(zip(COUNTERS, map(int, row[1:]), strict=True))
                for row in rows if row[0] in (*self.work, self.dead)}
        missing = sorted((set(self.work) | {self.dead}) - set(ours))
        if missing:
            raise RuntimeError(f"rabbitmqctl list_queues does not list {missing} in vhost "
                               f"{self.vhost!r}")
        return ours

    def _messages(self) -> int | None:
        """Messages in the work queue and its retry tiers; None while the broker cannot say."""
        try:
            counters = self._counters()
        except RuntimeError:
            return None
        return sum(counters[name]["messages"] for name in self.work)

    async def _ready(self) -> int:
        connection = await aio_pika.connect(self.url, timeout=5)
        async with connection:
            channel = await connection.channel()
            total = 0
            for name in self.work:
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

    def disrupt(self, pids: set[int]) -> Cut:
        """Close every AMQP connection of the consumers ``pids`` (named ``jobq <role> host:pid``)."""
        suffixes = tuple(f":{pid}" for pid in pids)
        # `name` is the TCP pair; the name the client chose is among its client_properties.
        rows = [[row[0], match.group(1)]
                for row in rabbitmqctl_rows(*self._on_node(), "list_connections", "-p",
                                            self.vhost, "pid", "client_properties")
                if (match := CONNECTION_NAME.search(row[-1]))]
        # All at once: each rabbitmqctl takes about a second to start, and the cut should land
        # on every consumer at the same moment, like a network blip.
        closing = [(name, subprocess.Popen(
            ["rabbitmqctl", *self._on_node(), "close_connection", conn,
             "jobq fault suite: connection cut"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for conn, name in ((row[0], row[-1]) for row in rows)
            if name.startswith("jobq ") and name.endswith(suffixes)]
        cut: collections.Counter[str] = collections.Counter()
        for name, proc in closing:
            if proc.wait(timeout=60) == 0:  # else it went away by itself meanwhile
                cut[name.rpartition(":")[2]] += 1
        return Cut(sum(cut.values()), len(cut))

    def final_state(self, accepted: list[str]) -> FinalState:
        """Dead, still queued, and done (the rest accepted), each checked against the counters."""
        state = FinalState()
        counters = self._counters()
        unacked = sum(c["messages_unacknowledged"] for c in counters.values())
        if unacked:
            state.problems.append(f"{unacked} messages still unacknowledged after every "
                                  f"consumer stopped: {counters}")
        dead = json.loads(self._jobq("dead", "list", "--json", "--limit", "1000000").stdout)
        state.dead = {str(row["id"]): str(row.get("last_error")) for row in dead}
        if len(dead) != counters[self.dead]["messages"]:
            state.problems.append(f"`jobq dead list` shows {len(dead)} dead, the broker counts "
                                  f"{counters[self.dead]['messages']} in {self.dead}")
        twice = [i for i, n in collections.Counter(str(row["id"]) for row in dead).items() if n > 1]
        if twice:
            state.problems.append(f"dead-lettered more than once (first 10): {twice[:10]}")
        queued = sum(counters[name]["messages"] for name in self.work)
        left = asyncio.run(self._queued_ids()) if queued else []
        if len(left) != queued:
            state.problems.append(f"walked {len(left)} queued messages, the broker counts {queued}")
        state.unfinished = queued
        state.waiting = set(left)
        # The broker keeps nothing of an acked message: done is every accepted job that is
        # neither dead nor still queued. An ack without a completion then shows as done
        # without a record (lost work), as on Postgres.
        state.done = set(accepted) - set(state.dead) - set(left)
        return state

    async def _queued_ids(self) -> list[str]:
        """The ids of the messages left in the work queue and its tiers; they stay queued."""
        connection = await aio_pika.connect(self.url, timeout=5)
        async with connection:
            ids: list[str] = []
            for name in self.work:
                # Taken unacked on a channel of its own: closing it puts them back.
                async with connection.channel() as channel:
                    queue = await channel.declare_queue(name, passive=True)
                    while (message := await queue.get(no_ack=False, fail=False)) is not None:
                        ids.append(str(message.message_id))
            return ids

    def kill_server(self) -> None:
        """kill -9 the node's beam.smp: a crash (ensure_up starts it again)."""
        servers.crash_rabbit()

    def crash_window(self) -> float:
        """0: no commit of ours is asynchronous on the broker (see faults/verdict.py's caveat)."""
        return 0.0

    def ensure_up(self) -> None:
        """Start the node (or its app) if it does not answer; ServerDown if it does not come back."""
        servers.start_rabbit()

    def cleanup(self) -> None:
        """Delete the queues and the dead-letter exchange of the run's queue."""
        asyncio.run(self._drop())

    async def _drop(self) -> None:
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            for name in (*self.work, self.dead, f"{self.queue}.paused", f"{self.queue}.cancelled"):
                await channel.queue_delete(name)
            await channel.exchange_delete(f"{self.queue}.dlx")
