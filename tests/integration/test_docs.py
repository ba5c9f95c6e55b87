"""The README's first program and the tutorial run as written, from the wheel alone (issue 36).

Every block of docs/tutorial.md and of the README's "A first program", on both backends, run
by tests/docs_run.py in a directory of their own with a clean virtualenv's bin first on PATH,
as a reader's activated one would be; a PostgreSQL schema and a RabbitMQ vhost of their own,
so the pages' names (the default queue) meet nothing of another test's.
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
    readme = f"{isolated['JOBQ_POSTGRES__SCHEMA']}_readme"  # its job 1 is not the tutorial's
    try:
        for transport in ("postgres", "rabbitmq"):
            (work / transport).mkdir()
            said = run_page(ROOT / "README.md", work / transport,
                            {**env, "JOBQ_POSTGRES__SCHEMA": readme, "JOBQ_TRANSPORT": transport},
                            heading="## A first program")
            assert f"on {transport}" in said[0], said
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(readme)))
    outputs = run_page(ROOT / "docs" / "tutorial.md", work, env)
    assert len(outputs) == 4, outputs  # the install (done above), PostgreSQL, the tests, RabbitMQ
    assert "on postgres" in outputs[1] and "on rabbitmq" in outputs[3], outputs


def run(args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout
