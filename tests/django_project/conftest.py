"""jobq's schema in pytest-django's test database, and the environment a consumer of it needs."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.conftest import ROOT, command

SCHEMA = f"dj_{uuid.uuid4().hex[:10]}"
os.environ["JOBQ_POSTGRES__SCHEMA"] = SCHEMA  # before jobq's settings are first read


@pytest.fixture
def consumer_env(transactional_db: None) -> Iterator[dict[str, str]]:
    """jobq initialised in the test database; the environment of a process that uses it."""
    name = connection.settings_dict["NAME"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django_project.settings",
           "DJANGO_DB_NAME": name, "JOBQ_POSTGRES__SCHEMA": SCHEMA,
           "JOBQ_POSTGRES__DSN": f"postgresql://postgres@127.0.0.1:5432/{name}",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([command("jobq"), "init"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    with connection.cursor() as cur:  # the schema outlives a test; Django's tables are emptied
        cur.execute(f'TRUNCATE "{SCHEMA}".jobs')
    yield env
