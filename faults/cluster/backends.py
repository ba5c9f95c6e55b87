"""The fault suite's backends, pointed at the harness's own cluster: the fault is a failover.

``kill_server`` is the failover (the quorum queue's leader killed with -9; the PostgreSQL
primary crashed and the standby promoted), and ``ensure_up`` does not undo it: the drain must
finish on what is left. Everything else (the consumers' command, enqueue, the final state) is
the fault suite's, reading the surviving servers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from psycopg import conninfo

from faults.backend import ROOT, Options, enqueue_numbered
from faults.cluster.nodes import RabbitCluster
from faults.cluster.standby import PostgresPair
from faults.postgres import PostgresBackend
from faults.rabbitmq import RabbitBackend
from jobq.config import Settings, load_settings

# Asynchronous replication: a commit the primary had flushed can still be on its way to the
# standby when the primary goes. The walsender sends within milliseconds here; this allows for
# a loaded machine, and is counted into the crash window (duplicates, never losses).
REPLICATION_SLACK_S = 0.5


class ClusterRabbit(RabbitBackend):
    """A quorum work queue on the 3-node cluster, its dead queue quorum too (see below)."""

    def __init__(self, cluster: RabbitCluster) -> None:
        first = cluster.nodes[0]
        super().__init__("quorum", url=first.url, node=first.name)
        self.name = "rabbitmq-quorum-cluster"
        self.cluster = cluster
        self.fault = ""
        self.fault_at: float | None = None
        self.members: list[str] = []

    def urls(self, start: int = 0) -> list[str]:
        """Every node's URL, from node ``start`` on (each consumer starts at another node)."""
        nodes = self.cluster.nodes[start:] + self.cluster.nodes[:start]
        return [n.url for n in nodes]

    def _env(self) -> dict[str, str]:
        # A classic queue lives on one node: the dead letters of a cluster go to a quorum queue,
        # as docs/scaling.md advises, or a dead node would take them with it.
        return {**super()._env(), "JOBQ_RABBITMQ__DEAD_QUEUE_TYPE": "quorum"}

    def setup(self) -> None:
        """``jobq init`` through node 1; the work queue must have a replica on every node."""
        super().setup()
        self.members = self.cluster.members(self.queue)
        if len(self.members) != len(self.cluster.nodes):
            raise RuntimeError(f"{self.queue} has replicas on {self.members} only")

    def consumer_command(self, record_dir: Path, options: Options, index: int
                         ) -> tuple[list[str], dict[str, str]]:
        """The suite's consumer, given every node, starting at node ``index`` (mod 3)."""
        argv, env = super().consumer_command(record_dir, options, index)
        env["JOBQ_RABBITMQ__URLS"] = json.dumps(self.urls(index % len(self.cluster.nodes)))
        return argv, env

    def producer_settings(self) -> Settings:
        """The producer's settings: every node, from node 1."""
        return load_settings(ROOT / "configs" / "rabbitmq.yaml", {
            "rabbitmq.urls": self.urls(), "rabbitmq.queue_type": "quorum",
            "rabbitmq.dead_queue_type": "quorum", "queue": self.queue,
            "log.level": "warning"}, env={})

    async def enqueue(self, count: int) -> list[str]:
        """The suite's enqueue, through every node."""
        return await enqueue_numbered(self.producer_settings(), count)

    def kill_server(self) -> None:
        """kill -9 the node leading the work queue; read the broker from a survivor after."""
        leader = self.cluster.leader(self.queue)
        self.fault_at = time.monotonic()
        self.cluster.kill(leader)
        self.fault = f"leader {leader.name} killed -9"
        survivor = self.cluster.up()[0]
        self.url, self.node, self.port = survivor.url, survivor.name, survivor.port

    def ensure_up(self) -> None:
        """Nothing: the killed node stays down, the drain finishes on the other two."""

    def cleanup(self) -> None:
        """Nothing: the cluster is deleted with its files."""


class ClusterPostgres(PostgresBackend):
    """Lease mode on the primary; the consumers hold the two-host DSN (read-write)."""

    def __init__(self, pair: PostgresPair, promote_after: float, claim: str = "lease") -> None:
        super().__init__(claim, dsn=pair.dsn(pair.primary_port))
        self.name = f"postgres-{claim}-failover"
        self.pair = pair
        self.promote_after = promote_after
        self.fault = ""
        self.fault_at: float | None = None

    def _env(self, options: Options | None = None, index: int = 0) -> dict[str, str]:
        env = super()._env(options, index)
        env["JOBQ_PG_DSN"] = conninfo.make_conninfo(self.pair.failover_dsn,
                                                    application_name=f"{self.app}-c{index}")
        return env

    def producer_settings(self) -> Settings:
        """The producer's settings: the two-host DSN."""
        return load_settings(ROOT / "configs" / "postgres.yaml", {
            "postgres.dsn": self.pair.failover_dsn, "postgres.schema": self.schema,
            "queue": self.queue, "log.level": "warning"}, env={})

    def kill_server(self) -> None:
        """Crash the primary, wait ``promote_after`` (a failover manager's detection), promote."""
        self.fault_at = time.monotonic()
        self.pair.crash_primary()
        time.sleep(self.promote_after)
        took = self.pair.promote()
        self.fault = (f"primary stopped -m immediate, standby promoted after "
                      f"{self.promote_after:g}s (promote took {took:.1f}s)")
        self.dsn, self.port = self.pair.dsn(self.pair.standby_port), self.pair.standby_port

    def crash_window(self) -> float:
        """The suite's window (asynchronous commits), plus what replication had not yet sent."""
        return super().crash_window() + REPLICATION_SLACK_S

    def ensure_up(self) -> None:
        """Nothing: the old primary stays down, the promoted standby is the server now."""

    def cleanup(self) -> None:
        """Nothing: the pair is deleted with its files."""
