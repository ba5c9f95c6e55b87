"""The release: the wheel and sdist PyPA's builder makes pass `twine check`, carry one version,
the backends as extras and the commands; `jobq --version`; a missing driver is one line."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import jobq
from tests.conftest import ROOT

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # In a copy: the build writes build/ and *.egg-info next to the sources it is given.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                            str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def test_the_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    files = sorted(str(p) for p in dist.iterdir())
    assert len(files) == 2, files
    assert {Path(f).suffix for f in files} == {".whl", ".gz"}, files  # a wheel and an sdist
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_wheel_carries_one_version_the_extras_and_the_commands(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(archive.read(meta_name))
        scripts = archive.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert meta["Version"] == jobq.__version__
    assert set(meta.get_all("Provides-Extra") or []) >= {"postgres", "rabbitmq", "dashboard",
                                                          "otel", "sentry", "django"}
    requires = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("psycopg") and 'extra == "postgres"' in r for r in requires), requires
    assert any(r.startswith("aio-pika") and 'extra == "rabbitmq"' in r for r in requires), requires
    assert "Typing :: Typed" in (meta.get_all("Classifier") or [])
    for command in ("jobq = jobq.cli.main:admin_main", "consumer = ", "producer = "):
        assert command in scripts, scripts
    assert "jobq/py.typed" in names and "jobq/transports/postgres/sql/queries.sql" in names
    assert "jobq/contrib/django/management/commands/jobq_consume.py" in names


def test_version_and_the_namespaced_commands() -> None:
    said = subprocess.run([str(BIN / "jobq"), "--version"], capture_output=True, text=True)
    assert said.stdout.strip() == f"jobq {jobq.__version__}", said
    for name, described in (("consume", "Run a jobq worker pool: "),
                            ("enqueue", "Enqueue generated jobs (")):
        helped = subprocess.run([str(BIN / "jobq"), name, "--help"], capture_output=True,
                                text=True)
        assert helped.returncode == 0 and f"usage: jobq {name}" in helped.stdout, helped
        assert described in helped.stdout


def test_a_missing_driver_names_the_extra_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "psycopg"  # shadows the installed driver: importing it fails as if absent
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    ran = subprocess.run([str(BIN / "jobq"), "stats", "-t", "postgres"], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
                         cwd=tmp_path, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "jobq: config error: transport: the postgres backend needs its driver (psycopg), which "
        "is not installed: pip install 'jobq[postgres]'"], ran.stderr
