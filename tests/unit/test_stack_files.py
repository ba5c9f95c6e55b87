"""The compose demo stack, checked without a Docker engine.

Real tools validate the files (docker-compose against the compose schema, promtool on the
Prometheus configs); the rest checks that the stack fits the code: every command parses with
the real CLI parser and loads with the compose config, every mounted file exists, Prometheus
scrapes the consumers' metrics ports, and the dashboard asks only for metrics the code exports.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from jobq import Job, PermanentError, config
from jobq.cli import running
from jobq.config import Settings, load_settings
from jobq.core.job import ACK, Dead
from jobq.core.port import Depth, Health
from jobq.observability.metrics import TRANSPORT_COUNTERS, Metrics
from jobq.worker.processor import load_processor
from tests.conftest import ROOT, need_tool
from tools.stack import composefile

COMPOSE_DIR = ROOT / "compose"
SERVICES: dict[str, Any] = composefile.load()["services"]
JOBQ_SERVICES = [name for name, s in SERVICES.items() if s.get("image") == "jobq:demo"]
CONSUMERS = [name for name in SERVICES if name.startswith("consumer-")]
DASHBOARD = COMPOSE_DIR / "grafana" / "dashboards" / "jobq.json"
APP = PurePosixPath("/app")  # the image's WORKDIR: compose commands' relative paths start here


def settings_for(service: str, argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """What the program would run with: its argv through the real parser and config loader,
    in the service's environment, from the repository root (where /app/configs is mounted from)."""
    for key in [k for k in os.environ if k.startswith("JOBQ_")]:
        monkeypatch.delenv(key)
    for key, value in composefile.service_env(SERVICES[service], {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    return running.settings_of(composefile.parse(argv))


def test_compose_file_passes_docker_compose_config() -> None:
    tool = need_tool("docker-compose", "docker-compose")
    done = subprocess.run([tool, "-f", str(COMPOSE_DIR / "docker-compose.yml"), "config", "-q"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_prometheus_configs_pass_promtool(tmp_path: Path) -> None:
    tool = need_tool("promtool", "prometheus")
    native = tmp_path / "native.yml"
    native.write_text(yaml.safe_dump(composefile.native_prometheus_config(
        {"consumer-postgres": ["127.0.0.1:9101"], "consumer-rabbitmq": ["127.0.0.1:9102"]})))
    for path in (COMPOSE_DIR / "prometheus" / "prometheus.yml", native):
        done = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("service", JOBQ_SERVICES)
def test_every_command_is_a_valid_jobq_invocation(service: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    commands = composefile.jobq_commands(SERVICES[service])
    assert commands, f"{service} runs nothing"
    for argv in commands:
        args = composefile.parse(argv)  # SystemExit(2) on a bad flag
        if argv[:2] == ("jobq", "dashboard"):  # one source per --config and --transport
            assert sorted(args.transports) == ["postgres", "rabbitmq"], argv
            assert args.host == "0.0.0.0"  # in its container; the port maps to the loopback
            assert SERVICES[service]["ports"] == ["127.0.0.1:9820:9820"]
            for transport in args.transports:
                for key in [k for k in os.environ if k.startswith("JOBQ_")]:
                    monkeypatch.delenv(key)
                for key, value in composefile.service_env(SERVICES[service], {}).items():
                    monkeypatch.setenv(key, value)
                monkeypatch.chdir(ROOT)
                settings = load_settings(args.configs[0], {"transport": transport})
                assert settings.source == "configs/compose.yaml"
            continue
        assert args.transport, f"{' '.join(argv)}: name the transport explicitly"
        settings = settings_for(service, argv, monkeypatch)
        assert settings.source == "configs/compose.yaml"
        assert settings.transport == args.transport
        if argv[0] == "consumer":
            load_processor(settings.consumer.processor, settings.consumer.processor_args)


def test_each_transport_is_initialised_fed_and_consumed() -> None:
    def transports(service: str) -> set[str]:
        return {composefile.parse(argv).transport for argv in composefile.jobq_commands(
            SERVICES[service])}

    both = {"postgres", "rabbitmq"}
    assert transports("init") == both and transports("producer") == both
    assert {t for c in CONSUMERS for t in transports(c)} == both
    assert sorted(CONSUMERS) == ["consumer-postgres", "consumer-rabbitmq"]
    for name in CONSUMERS:
        assert transports(name) == {name.removeprefix("consumer-")}


def test_script_parsing() -> None:
    steps = composefile.split_script("set -e\njobq init -t postgres && jobq init -t rabbitmq\n"
                                     "producer -n 1 -a 'x=a b' &\nwait\n")
    assert [(s.argv, s.background) for s in steps] == [
        (("jobq", "init", "-t", "postgres"), False), (("jobq", "init", "-t", "rabbitmq"), False),
        (("producer", "-n", "1", "-a", "x=a b"), True), (("wait",), False)]
    with pytest.raises(ValueError, match="unsupported"):
        composefile.split_script("producer -n 1 | tee log")
    assert composefile.interpolate("a${X:-d}b${Y}c$$", {"Y": "y"}) == "adbyc$"


def test_compose_variables_are_read_by_jobqs_own_interpolation() -> None:
    assert composefile.interpolate("${X:-d}", {"X": ""}) == "d"  # the shell's :- (empty too)
    assert config.interpolate("${N:-1}", {}) == "-1"  # jobq's YAML: the '-' is the default's
    with pytest.raises(ValueError, match=r"write \$HOME as \$\{HOME\}"):
        composefile.interpolate("$HOME/x", {"HOME": "/h"})


def host_path(volume: str) -> Path | None:
    source = volume.split(":")[0]
    return (COMPOSE_DIR / source).resolve() if source.startswith(".") else None


def mounts(service: str) -> dict[PurePosixPath, Path]:
    """Container path -> host path of a service's bind mounts."""
    out = {}
    for volume in SERVICES[service].get("volumes", []):
        source = host_path(volume)
        if source is not None:
            out[PurePosixPath(volume.split(":")[1])] = source
    return out


def in_container(service: str, path: PurePosixPath) -> Path | None:
    """The host file behind a container path, through the service's mounts."""
    for target, source in mounts(service).items():
        if path == target or target in path.parents:
            return source / path.relative_to(target)
    return None


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_mounted_files_exist(service: str) -> None:
    for target, source in mounts(service).items():
        assert source.exists(), f"{service}: {source} (mounted at {target}) does not exist"


@pytest.mark.parametrize("service", JOBQ_SERVICES)
def test_config_files_are_mounted_where_the_commands_look(service: str) -> None:
    for argv in composefile.jobq_commands(SERVICES[service]):
        args = composefile.parse(argv)
        for path in getattr(args, "configs", None) or [args.config]:  # dashboard: several
            host = in_container(service, APP / path)
            assert host is not None and host.is_file(), f"{service}: {path} is not mounted"
            extends = yaml.safe_load(host.read_text()).get("extends")
            assert extends is None or (host.parent / extends).is_file()


def test_grafana_provisioning_points_at_mounted_files() -> None:
    env = composefile.service_env(SERVICES["grafana"], {})
    home = in_container("grafana", PurePosixPath(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]))
    assert home == DASHBOARD.resolve()
    provisioning = in_container("grafana", PurePosixPath("/etc/grafana/provisioning"))
    assert provisioning is not None
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "jobq.yml").read_text())["providers"]
    assert in_container("grafana", PurePosixPath(provider["options"]["path"])) == DASHBOARD.parent
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"]
    assert source["url"] == "http://prometheus:9090" and "prometheus" in SERVICES
    used = {t["datasource"]["uid"] for p in json.loads(DASHBOARD.read_text())["panels"]
            for t in p["targets"]}
    assert used == {source["uid"]}


def test_prometheus_scrapes_every_consumer_on_its_metrics_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = composefile.prometheus_config()
    assert in_container("prometheus", PurePosixPath("/etc/prometheus/prometheus.yml")) == (
        COMPOSE_DIR / "prometheus" / "prometheus.yml").resolve()
    scraped: dict[str, int] = {}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
        for sd in job["dns_sd_configs"]:
            for name in sd["names"]:
                scraped[name] = sd["port"]
    expected = {}
    for service in CONSUMERS:
        (argv,) = composefile.jobq_commands(SERVICES[service])
        metrics = settings_for(service, argv, monkeypatch).metrics
        assert metrics.enabled and metrics.host == "0.0.0.0", f"{service}: metrics not reachable"
        expected[service] = metrics.port
        probe = " ".join(SERVICES[service]["healthcheck"]["test"])
        assert f"127.0.0.1:{metrics.port}/readyz" in probe
    assert scraped == expected


def test_healthchecks_and_start_order() -> None:
    for name in ("postgres", "rabbitmq", *CONSUMERS, "prometheus", "grafana"):
        assert SERVICES[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert SERVICES["init"]["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                              "rabbitmq": {"condition": "service_healthy"}}
    for name in ("producer", *CONSUMERS):
        assert SERVICES[name]["depends_on"] == {
            "init": {"condition": "service_completed_successfully"}}
    assert SERVICES["grafana"]["depends_on"]["prometheus"] == {"condition": "service_healthy"}
    for name in CONSUMERS:  # --scale needs neither a fixed name nor a published port
        assert "container_name" not in SERVICES[name] and "ports" not in SERVICES[name]
        assert SERVICES[name]["stop_grace_period"]


def exported() -> dict[str, set[str]]:
    """Every sample name the code exports, with its label names (every metric exercised)."""
    metrics = Metrics("postgres", "q")

    class Pool:
        in_flight, buffered, consuming = 1, 0, True

    class Transport:
        def health(self) -> Health:
            return Health(True, dict.fromkeys(TRANSPORT_COUNTERS, 0))

    metrics.watch(Pool(), Transport())
    job = Job(id="1", queue="q", kind="k", payload={}, attempt=2, enqueued_at=datetime.now(UTC))
    metrics.settled(ACK, 0.1, None, job)
    metrics.settled(Dead("x"), 0.1, PermanentError("x"), job)
    metrics.depth(Depth(depth={"pending": 1}, oldest_pending_seconds=1.0))
    names: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            names.setdefault(s.name, set()).update(s.labels)
    return names


def test_dashboard_uses_only_metrics_and_labels_the_code_exports() -> None:
    names = exported()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len(panels) >= 4
    seen = set()
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"\b(jobq_[a-z_]+)", expr))
            assert used, f"{panel['title']}: no jobq metric in {expr}"
            unknown = used - set(names)
            assert not unknown, f"{panel['title']}: {sorted(unknown)} not exported"
            labels = set().union(*(names[n] for n in used)) | {"instance", "job"}
            grouped = {w.strip() for group in re.findall(r"by \(([^)]*)\)", expr)
                       for w in group.split(",")}
            matched = set(re.findall(r"([a-z_]+)\s*=~?\s*\"", expr))
            assert grouped | matched <= labels, f"{panel['title']}: unknown label in {expr}"
            seen |= used
    # Throughput, latency percentiles, depth and failures, per transport (the list).
    assert {"jobq_jobs_total", "jobq_job_latency_seconds_bucket", "jobq_queue_depth"} <= seen
    titles = " ".join(p["title"].lower() for p in panels)
    for word in ("throughput", "latency", "depth", "failures"):
        assert word in titles


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_slim_non_root_and_caches_dependencies() -> None:
    steps = dockerfile()
    (base,) = [args for op, args in steps if op == "FROM"]
    assert base.startswith("python:3.11") and "slim" in base
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    ops = [f"{op} {args}" for op, args in steps]
    deps = next(i for i, s in enumerate(ops) if s.startswith("RUN") and (
        "pip install ." in s or 'pip install ".[' in s))
    code = next(i for i, s in enumerate(ops) if s.startswith("COPY src"))
    assert deps < code, "dependencies must be installed before the source is copied"
    assert all(src in ("pyproject.toml", "README.md") for src in ops[deps - 1].split()[1:-1])
    ignored = (ROOT / ".dockerignore").read_text().split()
    for op, args in steps:
        if op == "COPY":
            for source in shlex.split(args)[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such file"
                assert f"!{source.rstrip('/')}/" in ignored or f"!{source}" in ignored
    (cmd,) = [json.loads(args) for op, args in steps if op == "CMD"]
    composefile.parse(tuple(cmd))
    services = {s["build"]["dockerfile"] for s in SERVICES.values() if "build" in s}
    assert services == {"Dockerfile"}
