"""The tutorial runs as written: every block of docs/tutorial.md, on both backends (issue 36).

Run in a directory of its own, with the test's Python first on PATH as a reader's activated
virtualenv would be; its own PostgreSQL schema and RabbitMQ vhost, so the page's names (the
default queue) meet nothing of another test's. The wheel's clean-venv run of the same page
is in test_wheel.py.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import ROOT
from tests.docs_run import run_page, venv_env

pytestmark = pytest.mark.integration


def rabbitmqctl(*args: str) -> None:
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def isolated(pg_dsn: str) -> Iterator[dict[str, str]]:
    """A schema name no one uses (the page's `jobq init` creates it) and a vhost of its own,
    as JOBQ_ variables; both removed after."""
    tag = uuid.uuid4().hex[:10]
    schema, vhost = f"doc_{tag}", f"jobq-doc-{tag}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield {"JOBQ_POSTGRES__DSN": pg_dsn, "JOBQ_POSTGRES__SCHEMA": schema,
               "JOBQ_RABBITMQ__URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}"}
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.slow
def test_the_tutorial_runs_as_written(isolated: dict[str, str], tmp_path: Path) -> None:
    outputs = run_page(ROOT / "docs" / "tutorial.md", tmp_path,
                       venv_env(Path(sys.executable).parent, **isolated))
    assert len(outputs) == 4, outputs  # the install (the caller's), PostgreSQL, the tests, RabbitMQ
    assert "on postgres" in outputs[1] and "on rabbitmq" in outputs[3], outputs


@pytest.mark.parametrize("transport", ["postgres", "rabbitmq"])
def test_the_readmes_first_program_runs_as_written(
        isolated: dict[str, str], transport: str, tmp_path: Path) -> None:
    env = venv_env(Path(sys.executable).parent, JOBQ_TRANSPORT=transport, **isolated)
    outputs = run_page(ROOT / "README.md", tmp_path, env, heading="## A first program")
    assert f"on {transport}" in outputs[0], outputs


@pytest.mark.slow
def test_the_wheel_alone_in_a_clean_venv_runs_the_readme_and_the_tutorial(
        isolated: dict[str, str], pg_dsn: str, tmp_path: Path) -> None:
    """What a user gets from `pip install jobq-<version>.whl`: nothing of this checkout on the
    path, the dependencies the wheel declares and nothing more (but pytest, which the
    tutorial installs too)."""
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)])
    (wheel,) = dist.glob("jobq-*.whl")
    uv = str(Path(sys.executable).parent / "uv")
    run([uv, "venv", "-q", "--python", sys.executable, str(venv)])
    run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
         f"{wheel}[postgres,rabbitmq]", "pytest", "pytest-asyncio"])
    env = venv_env(venv / "bin", **isolated)
    where = run([str(venv / "bin" / "python"), "-c", "import jobq; print(jobq.__file__)"],
                cwd=work, env=env)
    assert where.startswith(str(venv)), where  # the wheel's copy, not this checkout's
    assert run([str(venv / "bin" / "jobq"), "--version"], env=env).startswith("jobq ")
    readme = f"{isolated['JOBQ_POSTGRES__SCHEMA']}_readme"
    try:
        run_page(ROOT / "README.md", work, {**env, "JOBQ_POSTGRES__SCHEMA": readme},
                 heading="## A first program")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(readme)))
    run_page(ROOT / "docs" / "tutorial.md", work, env)


def run(args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout
