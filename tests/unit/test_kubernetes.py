"""deploy/kubernetes/jobq.yaml: every Kubernetes object valid against the Kubernetes schemas
(kubernetes-validate, offline, strict), and the parts that must agree with jobq itself: the
consumer's command and config, the probes on its metrics port, a grace period above its own
shutdown bound, the KEDA ScaledObject aimed at the Deployment on a metric jobq exports.

The ScaledObject is validated against KEDA's own CRD schema by @kubernetes-models/keda (the
schemas generated from KEDA's CRDs, with its validator), installed by `make test` into
tests/keda with `npm ci` (offline afterwards) and run by node: tests/keda/validate.mjs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from jobq.cli import main as cli
from jobq.config import load_settings
from jobq.observability.metrics import Metrics
from jobq.wiring.backstop import shutdown_bound

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes" / "jobq.yaml"
DOCS = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
BY_KIND = {d["kind"]: d for d in DOCS}
VERSION = "1.30.0"  # the oldest Kubernetes these are meant for; policy/v1 PDBs need 1.21


KEDA = ROOT / "tests" / "keda"


def keda_validate(docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """tests/keda/validate.mjs over ``docs``; fails the test if node or the schemas are missing."""
    node = shutil.which("node")
    if node is None or not (KEDA / "node_modules" / "@kubernetes-models" / "keda").is_dir():
        pytest.fail("KEDA's schemas are not installed: `npm ci --prefix tests/keda` (make test "
                    "does it) needs node and npm")
    return subprocess.run([node, str(KEDA / "validate.mjs")], input=json.dumps(docs),
                          capture_output=True, text=True, timeout=60)


def test_the_scaled_object_passes_kedas_own_schema() -> None:
    keda = [d for d in DOCS if d["apiVersion"] == "keda.sh/v1alpha1"]
    assert [d["kind"] for d in keda] == ["ScaledObject"]
    done = keda_validate(keda)
    assert done.returncode == 0, done.stderr
    assert "ScaledObject/jobq-consumer: valid" in done.stdout


def test_kedas_schema_refuses_a_broken_scaled_object() -> None:
    broken = json.loads(json.dumps(BY_KIND["ScaledObject"]))
    del broken["spec"]["scaleTargetRef"]
    broken["spec"]["triggers"][0]["metadata"] = "threshold=10"  # a map, in KEDA's schema
    done = keda_validate([broken])
    assert done.returncode == 1
    assert "required property scaleTargetRef" in done.stderr, done.stderr
    assert "triggers/0/metadata must be object" in done.stderr, done.stderr


@pytest.mark.parametrize("doc", [d for d in DOCS if d["apiVersion"] != "keda.sh/v1alpha1"],
                         ids=lambda d: d["kind"])
def test_every_object_passes_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, VERSION, strict=True)  # ValidationError if not


def container() -> dict[str, Any]:
    (only,) = BY_KIND["Deployment"]["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def test_the_consumer_runs_the_mounted_config_with_its_secrets(tmp_path: Path) -> None:
    args = cli.consumer_parser().parse_args(container()["args"][1:])
    assert container()["args"][0] == "consumer"
    mount = next(m for m in container()["volumeMounts"] if m["name"] == "config")
    assert args.config.startswith(mount["mountPath"] + "/")
    config = BY_KIND["ConfigMap"]["data"]
    for name, text in config.items():
        (tmp_path / name).write_text(text)
    secrets = BY_KIND["Secret"]["stringData"]
    assert container()["envFrom"] == [{"secretRef": {"name": BY_KIND["Secret"]["metadata"]["name"]}}]
    settings = load_settings(tmp_path / Path(args.config).name, env=secrets)
    assert settings.metrics.enabled and settings.metrics.host == "0.0.0.0"
    (port,) = container()["ports"]
    assert port["containerPort"] == settings.metrics.port
    assert container()["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container()["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    grace = BY_KIND["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > shutdown_bound(settings), (grace, shutdown_bound(settings))
    assert "target_session_attrs=read-write" in secrets["JOBQ_PG_DSN"]
    assert container()["resources"]["requests"] and container()["resources"]["limits"]


def test_the_pdb_and_the_scaler_point_at_the_deployment() -> None:
    labels = BY_KIND["Deployment"]["spec"]["selector"]["matchLabels"]
    assert BY_KIND["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    assert BY_KIND["Service"]["spec"]["selector"] == labels
    scaled = BY_KIND["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == BY_KIND["Deployment"]["metadata"]["name"]
    assert 1 <= scaled["minReplicaCount"] < scaled["maxReplicaCount"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "prometheus" and float(trigger["metadata"]["threshold"]) > 0
    exported = {family.name for family in Metrics("postgres", "emails").registry.collect()}
    query = trigger["metadata"]["query"]
    assert query.startswith("max(") and "jobq_queue_depth" in query and "jobq_queue_depth" in exported


def test_the_validator_refuses_a_broken_object() -> None:
    broken = yaml.safe_load(yaml.safe_dump(BY_KIND["Deployment"]))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)
    extra = yaml.safe_load(yaml.safe_dump(BY_KIND["PodDisruptionBudget"]))
    extra["spec"]["maxUnavailabel"] = 1  # a typo: strict validation rejects unknown fields
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(extra, VERSION, strict=True)
