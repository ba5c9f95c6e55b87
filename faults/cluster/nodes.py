"""A 3-node RabbitMQ cluster of the harness's own, beside the machine's node.

Each node has its own name (``jobqc1@localhost`` ...), AMQP port (5781-5783 by default),
distribution port (25781-25783), data, log, config, plugins and feature-flags files under one
temporary directory, and runs as the ``rabbitmq`` user with that user's Erlang cookie (the
machine's node and epmd are left alone; epmd only gains and loses registrations). Nodes 2 and
3 join node 1 with ``rabbitmqctl join_cluster``. Every wait is bounded; a node that does not
answer raises ServerDown naming it and its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from faults.backend import tcp_up
from faults.servers import ServerDown, command, gone, said, wait_until

BOOT_S = 90.0  # a node's first boot (Mnesia, feature flags) takes a few seconds here
USER = "rabbitmq"
HOME = "/var/lib/rabbitmq"  # where the rabbitmq user's .erlang.cookie is
SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


@dataclass(frozen=True)
class Node:
    """One node of the cluster."""

    index: int
    name: str  # jobqc1@localhost
    port: int  # AMQP
    dist_port: int
    base: Path  # its files

    @property
    def url(self) -> str:
        """Its AMQP URL (the default guest user, which RabbitMQ allows from loopback)."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


def as_user(user: str, *argv: str) -> list[str]:
    """``argv`` run as ``user`` (through runuser when we are root; as ourselves otherwise)."""
    return ["runuser", "-u", user, "--", *argv] if os.geteuid() == 0 else list(argv)


def chown_tree(path: Path, user: str) -> None:
    """Give ``path`` and everything under it to ``user`` (a no-op unless we are root)."""
    if os.geteuid() != 0:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in (root, *(os.path.join(root, d) for d in dirs),
                     *(os.path.join(root, f) for f in files)):
            os.chown(name, entry.pw_uid, entry.pw_gid)


class RabbitCluster:
    """Three RabbitMQ nodes joined into one cluster; ``stop`` leaves nothing behind."""

    def __init__(self, first_port: int = 5781, size: int = 3, *, prefix: str = "jobqc",
                 plugins: tuple[str, ...] = (), conf: tuple[str, ...] = ()) -> None:
        """``size`` nodes named ``<prefix><i>@localhost``; ``plugins`` enabled on each, and
        ``conf``'s lines added to each one's rabbitmq.conf (``{i}``: the node's index)."""
        self.dir = Path(tempfile.mkdtemp(prefix="jobq-cluster-rmq-"))
        self._plugins, self._conf = plugins, conf
        self.nodes = [Node(i, f"{prefix}{i}@localhost", first_port + i - 1,
                           first_port + 20000 + i - 1, self.dir / f"n{i}")
                      for i in range(1, size + 1)]
        self.down: set[str] = set()  # nodes the harness killed

    def ctl(self, node: Node, *args: str, timeout: float = 60) -> list[str]:
        """``rabbitmqctl -n <node> args``; its output lines; RuntimeError when it fails."""
        done = command("rabbitmqctl", "-n", node.name, *args, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(said(done))
        return done.stdout.splitlines()

    def start(self) -> None:
        """Start every node, join 2.. to 1, and wait until all of them run the rabbit app."""
        taken = [f"127.0.0.1:{p}" for n in self.nodes for p in (n.port, n.dist_port)
                 if tcp_up("127.0.0.1", p)]
        if taken:
            raise ServerDown(f"the cluster's ports are taken: {', '.join(taken)} (another "
                             f"harness still running? pick others with --rabbit-port)")
        for node in self.nodes:
            self._boot(node)
        for node in self.nodes:
            self._await(node)
        for node in self.nodes[1:]:
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", self.nodes[0].name)
            self.ctl(node, "start_app", timeout=BOOT_S)
        status = json.loads("".join(self.ctl(self.nodes[0], "cluster_status", "--formatter",
                                             "json")))
        missing = [n.name for n in self.nodes if n.name not in status.get("running_nodes", [])]
        if missing:
            raise ServerDown(f"the cluster formed without {missing}: {status}")

    def _boot(self, node: Node) -> None:
        node.base.mkdir(parents=True)
        (node.base / "env.conf").write_text("ERL_EPMD_ADDRESS=127.0.0.1\n")
        (node.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{node.port}\n"
            # Quick failure detection between nodes (the default tick is 60 s).
            "net_ticktime = 10\n" + "".join(f"{line.format(i=node.index)}\n" for line in self._conf))
        (node.base / "enabled_plugins").write_text(f"[{','.join(self._plugins)}].\n")
        chown_tree(self.dir, USER)
        env = {"HOME": HOME, "RABBITMQ_CONF_ENV_FILE": str(node.base / "env.conf"),
               "RABBITMQ_NODENAME": node.name, "RABBITMQ_NODE_PORT": str(node.port),
               "RABBITMQ_DIST_PORT": str(node.dist_port),
               "RABBITMQ_MNESIA_BASE": str(node.base / "mnesia"),
               "RABBITMQ_LOG_BASE": str(node.base / "log"),
               "RABBITMQ_CONFIG_FILE": str(node.base / "rabbitmq.conf"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(node.base / "enabled_plugins"),
               "RABBITMQ_FEATURE_FLAGS_FILE": str(node.base / "feature_flags"),
               "RABBITMQ_PID_FILE": str(node.base / "pid"),
               "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}"}
        done = command(*as_user(USER, "env", *(f"{k}={v}" for k, v in env.items()), SERVER,
                                "-detached"), daemon=True, timeout=60)
        if done.returncode != 0:
            raise ServerDown(f"RabbitMQ node {node.name} did not start: {said(done)}")

    def _await(self, node: Node) -> None:
        wait_until(lambda: command("rabbitmqctl", "-n", node.name, "await_startup", "--timeout",
                                   "10", timeout=20).returncode == 0 and tcp_up("127.0.0.1", node.port),
                   BOOT_S, f"RabbitMQ node {node.name} did not answer (log: {node.base / 'log'})")

    def up(self) -> list[Node]:
        """The nodes the harness has not killed."""
        return [n for n in self.nodes if n.name not in self.down]

    def leader(self, queue: str) -> Node:
        """The node leading quorum queue ``queue`` now, asked of a live node."""
        for line in self.ctl(self.up()[0], "list_queues", "-q", "--no-table-headers", "name",
                             "leader"):
            name, _, leader = line.partition("\t")
            if name == queue:
                return next(n for n in self.nodes if n.name == leader.strip())
        raise RuntimeError(f"no node leads {queue!r} (not a quorum queue of this cluster?)")

    def members(self, queue: str) -> list[str]:
        """The nodes holding a replica of quorum queue ``queue``."""
        for line in self.ctl(self.up()[0], "list_queues", "-q", "--no-table-headers", "name",
                             "members"):
            name, _, members = line.partition("\t")
            if name == queue:
                return [m.strip() for m in members.strip("[] ").split(",") if m.strip()]
        raise RuntimeError(f"{queue!r} is not a queue of this cluster")

    def pid(self, node: Node) -> int:
        """The pid of the node's beam.smp, from the pid file rabbitmq-server wrote."""
        text = (node.base / "pid").read_text().strip()
        if not text.isdigit():
            raise RuntimeError(f"no pid in {node.base / 'pid'}")
        return int(text)

    def kill(self, node: Node) -> None:
        """kill -9 the node's beam.smp and wait until it is gone."""
        pid = self.pid(node)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: gone(pid), 30, f"{node.name} (pid {pid}) did not exit on SIGKILL")
        self.down.add(node.name)

    def stop(self) -> None:
        """Kill every node still running and delete the cluster's files."""
        try:
            for node in self.nodes:
                try:
                    pid = self.pid(node)
                except (OSError, RuntimeError):
                    continue  # it never started
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for node in self.nodes:  # every node was sent its kill before any wait
                with contextlib.suppress(OSError, RuntimeError):
                    pid = self.pid(node)
                    wait_until(lambda p=pid: gone(p), 30, f"{node.name} (pid {pid}) outlived SIGKILL")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
