"""jobq.contrib.django on a real Django project and PostgreSQL (issue 36, item 7): a job
enqueued in Django's transaction exists if and only if it commits, and ``manage.py
jobq_consume`` runs it with the project's ORM."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from jobq.contrib.django import enqueue
from jobq.contrib.django.apps import read
from tests.conftest import ROOT, command
from tests.contract.backends import drop_topology
from tests.django_project.conftest import SCHEMA
from tests.django_project.shop.models import Order
from tests.django_project.shop.tasks import Receipt, send_receipt


def jobs() -> list[tuple[str, str]]:
    with connection.cursor() as cur:
        cur.execute(f'SELECT kind, status FROM "{SCHEMA}".jobs ORDER BY id')
        return [(str(kind), str(status)) for kind, status in cur.fetchall()]


class Boom(Exception):
    pass


def test_a_job_enqueued_in_a_transaction_that_rolls_back_is_not_there(
        consumer_env: dict[str, str]) -> None:
    with pytest.raises(Boom), transaction.atomic():
        order = Order.objects.create(email="a@example.com")
        enqueue(send_receipt, Receipt(order.id))
        raise Boom
    assert Order.objects.count() == 0 and jobs() == []


def test_a_job_enqueued_in_a_transaction_that_commits_runs_in_jobq_consume(
        consumer_env: dict[str, str]) -> None:
    with transaction.atomic():
        enqueue(send_receipt, Receipt(0))  # first in the block: jobq's statement begins it
        order = Order.objects.create(email="b@example.com")
        enqueue(send_receipt, Receipt(order.id))
    assert jobs() == [("send_receipt", "pending")] * 2
    done = subprocess.run([sys.executable, "-m", "django", "jobq_consume", "--once"],
                          env=consumer_env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "app tests.django_project.shop.tasks:app" in done.stderr, done.stderr
    order.refresh_from_db()
    assert order.receipt_sent and jobs() == [("send_receipt", "done")] * 2


def test_outside_a_transaction_the_job_commits_at_once(consumer_env: dict[str, str]) -> None:
    job_id = enqueue(send_receipt, Receipt(1))
    assert job_id is not None and jobs() == [("send_receipt", "pending")]


def test_a_wrong_jobq_setting_is_named() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"unknown key.*APPS"):
        read({"APPS": "x"})
    with pytest.raises(ImproperlyConfigured, match=r"JOBQ\['DATABASE'\] must be a string"):
        read({"DATABASE": 1})


def test_on_rabbitmq_the_job_is_published_once_the_transaction_commits(
        consumer_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    queue = f"dj-{uuid.uuid4().hex[:8]}"
    try:
        published(queue, {**consumer_env, "JOBQ_TRANSPORT": "rabbitmq"}, monkeypatch)
    finally:  # the machine's broker is left as found
        asyncio.run(drop_topology(queue))


def published(queue: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Of three enqueues (rolled back, committed, outside a transaction), two are published."""
    init = subprocess.run([command("jobq"), "init", "-q", queue], env=env, capture_output=True,
                          text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    monkeypatch.setenv("JOBQ_TRANSPORT", "rabbitmq")
    config = apps.get_app_config("jobq")
    monkeypatch.setattr(config, "_settings", None)  # read again, with the variable above
    monkeypatch.setattr(config, "_publisher", None)
    try:
        with pytest.raises(Boom), transaction.atomic():
            assert enqueue(send_receipt, Receipt(1), queue=queue) is None  # waits for the commit
            raise Boom
        with transaction.atomic():
            assert enqueue(send_receipt, Receipt(2), queue=queue) is None
        assert enqueue(send_receipt, Receipt(3), queue=queue) is not None  # no transaction
    finally:
        if config._publisher is not None:
            config._publisher.close()
    stats = subprocess.run([command("jobq"), "stats", "-q", queue, "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["depth"]["ready"] == 2, stats.stdout
