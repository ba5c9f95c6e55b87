"""`make stack`: the compose demo stack run natively on this machine's servers.

Runs the init, producer and consumer commands of compose/docker-compose.yml (the same argv,
the same configs/compose.yaml) against the local PostgreSQL and RabbitMQ, one process per
container, each consumer with its metrics port open, plus Prometheus (Debian's package) with
the stack's scrape config pointed at those ports when it is installed. A fresh schema, queue
and exchange keep it apart from anything else on the servers; they are removed at the end.
Stops by itself after --seconds, or on Ctrl-C / SIGTERM.

    python -m tools.stack --transport postgres --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path

import yaml

from tools.stack import composefile
from tools.stack.cleanup import drop_rabbit, drop_schema

BIN = Path(sys.executable).parent
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
_METRICS_AT = re.compile(r"metrics on [^:\s]+:(\d+)")


class Proc:
    """A child process whose output is echoed with its name, compose-style."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.port: int | None = None
        self.got_port = threading.Event()
        # A session of its own: the terminal's Ctrl-C reaches only this runner, which then
        # sends each child exactly one SIGTERM (a second signal would force a consumer).
        self.popen = subprocess.Popen(argv, env=env, cwd=composefile.ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if self.port is None and (found := _METRICS_AT.search(line)):
                self.port = int(found.group(1))
                self.got_port.set()
            print(f"{self.name:<20}| {line}", end="", flush=True)

    def stop(self) -> None:
        """One SIGTERM (graceful drain for a consumer)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        """The exit code; killed if still running after ``timeout``."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (for Prometheus, which cannot report port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wanted(argv: Iterable[str], transports: list[str]) -> bool:
    """True if the command targets one of ``transports`` (compose commands always say which)."""
    return getattr(composefile.parse(tuple(argv)), "transport", None) in transports


def local(argv: tuple[str, ...]) -> list[str]:
    """The compose argv with its program resolved to this environment's script."""
    return [str(BIN / argv[0]), *argv[1:]]


class Stack:
    """The processes of one native stack run, and what to remove afterwards."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.services = composefile.load()["services"]
        self.tag = f"stack-{uuid.uuid4().hex[:8]}"
        self.schema = self.tag.replace("-", "_")
        self.consumers: list[Proc] = []
        self.producers: list[Proc] = []
        self.prometheus: Proc | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="jobq-stack-"))
        self.stopping = threading.Event()
        self.stopped: int | None = None

    def env(self, service: str) -> dict[str, str]:
        """The service's compose environment, pointed at the local servers and fresh names."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
        env.update(composefile.service_env(self.services[service]))
        env.update({
            "JOBQ_PG_DSN": os.environ.get("JOBQ_PG_DSN", PG_DSN),
            "JOBQ_AMQP_URL": os.environ.get("JOBQ_AMQP_URL", AMQP_URL),
            "JOBQ_QUEUE": self.tag,
            "JOBQ_POSTGRES__SCHEMA": self.schema,
            "JOBQ_RABBITMQ__EXCHANGE": self.tag,
            "JOBQ_METRICS__HOST": "127.0.0.1",  # the compose config binds 0.0.0.0 for containers
        })
        if self.args.summary is not None:
            env["JOBQ_LOG__SUMMARY_INTERVAL"] = str(self.args.summary)
        return env

    def init(self) -> None:
        """Run the init service's commands for the chosen transports, in order."""
        for argv in composefile.jobq_commands(self.services["init"]):
            if wanted(argv, self.args.transport):
                done = subprocess.run(local(argv), env=self.env("init"), cwd=composefile.ROOT,
                                      capture_output=True, text=True, timeout=120)
                print(f"{'init':<20}| {' '.join(argv)}: exit {done.returncode}", flush=True)
                if done.returncode != 0:
                    raise SystemExit(f"init failed:\n{done.stdout}{done.stderr}")

    def start_consumers(self) -> None:
        """``--scale`` consumers per transport, each on its own metrics port."""
        if self.stopping.is_set():
            raise SystemExit("stopped before the consumers started")
        base = self.args.metrics_port
        for transport in self.args.transport:
            service = f"consumer-{transport}"
            (argv,) = composefile.jobq_commands(self.services[service])
            for i in range(1, self.args.scale + 1):
                port = base + len(self.consumers) if base else 0
                self.consumers.append(Proc(f"{service}-{i}", [*local(argv), "--metrics-port",
                                                              str(port)], self.env(service)))
        for proc in self.consumers:
            if not proc.got_port.wait(60):
                raise SystemExit(f"{proc.name} did not open its metrics port")

    def run_producer(self) -> None:
        """The producer service's script: background steps, ``wait``, foreground steps."""
        for step in composefile.service_steps(self.services["producer"]):
            if self.stopping.is_set():
                return
            if step.is_wait:
                self._wait_producers()
            elif wanted(step.argv, self.args.transport):
                name = f"producer-{composefile.parse(step.argv).transport}"
                proc = Proc(name, local(step.argv), self.env("producer"))
                self.producers.append(proc)
                if not step.background:
                    self._wait_producers()

    def _wait_producers(self) -> None:
        while not self.stopping.is_set() and any(p.popen.poll() is None for p in self.producers):
            self.stopping.wait(0.2)

    def start_prometheus(self) -> str | None:
        """Prometheus scraping the consumers with the stack's own scrape config, if installed."""
        binary = shutil.which("prometheus")
        if binary is None or self.args.prometheus_port < 0:
            print("prometheus: not installed (apt-get install prometheus); skipped", flush=True)
            return None
        targets: dict[str, list[str]] = {}
        for proc in self.consumers:
            targets.setdefault(proc.name.rsplit("-", 1)[0], []).append(f"127.0.0.1:{proc.port}")
        config = composefile.native_prometheus_config(targets)
        path = self.tmp / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        address = f"127.0.0.1:{self.args.prometheus_port or free_port()}"
        self.prometheus = Proc("prometheus", [binary, f"--config.file={path}",
                                              f"--storage.tsdb.path={self.tmp / 'data'}",
                                              f"--web.listen-address={address}",
                                              "--log.level=warn"], dict(os.environ))
        url = f"http://{address}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    return url
            except OSError:
                time.sleep(0.2)
        raise SystemExit("prometheus did not become ready")

    def stop(self, grace: float) -> int:
        """SIGTERM everything and wait; 0 if every consumer exited 0. Runs once."""
        if self.stopped is not None:
            return self.stopped
        self.stopping.set()
        for proc in self.producers:
            proc.stop()
        for proc in self.consumers:
            proc.stop()
        codes = {proc.name: proc.wait(grace) for proc in self.consumers}
        for proc in self.producers:
            proc.wait(5)
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus.wait(10)
        print(f"stack: consumers exited {codes}", flush=True)
        self.stopped = 0 if all(code == 0 for code in codes.values()) else 1
        return self.stopped

    def cleanup(self) -> None:
        """Remove what this run created (never anything else), unless --keep."""
        if self.args.keep:
            print(f"stack: kept schema {self.schema!r} and queue {self.tag!r}", flush=True)
        else:
            if "postgres" in self.args.transport:
                drop_schema(os.environ.get("JOBQ_PG_DSN", PG_DSN), self.schema)
            if "rabbitmq" in self.args.transport:
                drop_rabbit(os.environ.get("JOBQ_AMQP_URL", AMQP_URL), self.tag)
        shutil.rmtree(self.tmp, ignore_errors=True)


def announce(stack: Stack, prometheus: str | None) -> None:
    """Tell people (and the test) where to look: one JSON line, then plain lines."""
    consumers = {p.name: f"http://127.0.0.1:{p.port}" for p in stack.consumers}
    info = {"queue": stack.tag, "schema": stack.schema, "prometheus": prometheus,
            "consumers": consumers}
    print("STACK READY " + json.dumps(info), flush=True)
    for name, url in consumers.items():
        print(f"  {name}: {url}/metrics  {url}/healthz  {url}/readyz", flush=True)
    if prometheus:
        print(f"  prometheus: {prometheus}/targets  (dashboard queries: {prometheus}/graph)",
              flush=True)


def run(args: argparse.Namespace) -> int:
    """Bring the stack up, keep it up until the deadline or a signal, bring it down."""
    stack = Stack(args)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stack.stopping.set())
    try:
        stack.init()
        stack.start_consumers()
        prometheus = stack.start_prometheus()
        threading.Thread(target=stack.run_producer, daemon=True).start()
        announce(stack, prometheus)
        deadline = time.monotonic() + args.seconds
        while not stack.stopping.wait(0.5) and time.monotonic() < deadline:
            dead = [p.name for p in stack.consumers if p.popen.poll() is not None]
            if dead:
                print(f"stack: {', '.join(dead)} exited; stopping", flush=True)
                break
        return stack.stop(grace=args.grace)
    finally:
        stack.stop(grace=5)  # after an error on the way up; a no-op once stopped
        stack.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run."""
    p = argparse.ArgumentParser(prog="make stack", description=__doc__.splitlines()[0])
    p.add_argument("--transport", action="append", choices=("postgres", "rabbitmq"),
                   help="repeatable (default: both)")
    p.add_argument("--scale", type=int, default=1, help="consumers per transport")
    p.add_argument("--seconds", type=float, default=120, help="stop by itself after this long")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="first consumer's port, the next ones follow (0: any free port)")
    p.add_argument("--prometheus-port", type=int, default=0, help="0: any free port; -1: none")
    p.add_argument("--summary", type=float, help="seconds between consumer summary lines")
    p.add_argument("--grace", type=float, default=40, help="seconds consumers get to drain")
    p.add_argument("--keep", action="store_true", help="leave the schema and queues in place")
    args = p.parse_args(argv)
    args.transport = args.transport or ["postgres", "rabbitmq"]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
