"""RabbitMQ permissions from docs/security.md: a vhost and a user limited to jobq's names are enough
for init, producer, consumer (retries, dead letters, releases) and dead list, and no more."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import aiormq
import pytest

from tests.conftest import ROOT, cli_env, run_cli, start_cli, wait_until
from tests.processors import completions

BLOCK = re.search(r"<!-- rabbitmq-permissions:begin -->\s*```sh\n(.*?)```",
                  (ROOT / "docs" / "security.md").read_text(), re.DOTALL)


def rabbitmqctl(*args: str) -> None:
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def tenant(amqp_url: str, queue_name: str) -> Iterator[dict[str, str]]:
    """A vhost and a user with the documented permissions for ``queue_name``; removed after."""
    assert BLOCK, "docs/security.md lost its rabbitmq-permissions block"
    (line,) = [x for x in BLOCK.group(1).splitlines() if x.startswith("rabbitmqctl set_permissions")]
    configure, write, read = (p.replace("emails", re.escape(queue_name)) for p in shlex.split(line)[-3:])
    tag = uuid.uuid4().hex[:8]
    vhost, user, password = f"jobq-sec-{tag}", f"jq-{tag}", uuid.uuid4().hex
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("add_user", user, password)
        rabbitmqctl("set_permissions", "-p", vhost, user, configure, write, read)
        yield {"vhost": vhost, "url": f"amqp://{user}:{password}@127.0.0.1:5672/{vhost}",
               "password": password, "user": user}
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)
        subprocess.run(["rabbitmqctl", "delete_user", user], capture_output=True, timeout=60)


@pytest.mark.slow
def test_the_documented_permissions_are_enough_and_no_more(
        tenant: dict[str, str], queue_name: str, tmp_path: Path) -> None:
    # Retries stay in the 1 s tier and never run out, so every demo job completes within the wait.
    env = cli_env(JOBQ_AMQP_URL=tenant["url"], JOBQ_CONNECT__ATTEMPTS="2", JOBQ_RETRY__MAX_DELAY="1",
                  JOBQ_RETRY__MAX_ATTEMPTS="20")
    config = ["--config", str(ROOT / "configs" / "rabbitmq.yaml"), "--queue", queue_name]
    for done in (run_cli("jobq", "init", *config, env=env),
                 run_cli("producer", *config, "--count", "20", "--kind", "demo", env=env),
                 run_cli("producer", *config, "--count", "1", "--kind", "bad", env=env)):
        assert done.returncode == 0, done.stderr
    consumer = ["consumer", *config, "-p", "tests.processors:record", "-a", f"directory={tmp_path}",
                "-a", "fail_kind=bad", "-a", "fail_rate=0.3", "-a", "sleep_ms=50", "-n", "2"]
    first = start_cli(*consumer, env=env)
    try:  # stopped while it holds unstarted deliveries: they are released (republished)
        assert wait_until(lambda: len(completions(tmp_path)) >= 3, 20)
    finally:
        first.send_signal(signal.SIGTERM)
        _, first_err = first.communicate(timeout=30)
    for step in ("pause", "stats", "resume"):  # publish to, read, delete and declare <q>.paused
        done = run_cli("jobq", step, *config, env=env)
        assert done.returncode == 0 and "paused" in done.stdout, done.stderr
    second = start_cli(*consumer, env=env)
    try:  # retries go through the tiers (default exchange), the bad one to the dead queue
        assert wait_until(lambda: len(set(completions(tmp_path))) == 20, 30)
    finally:
        second.send_signal(signal.SIGTERM)
        _, second_err = second.communicate(timeout=30)
    assert first.returncode == second.returncode == 0, first_err + second_err
    both = first_err + second_err
    assert "ACCESS_REFUSED" not in both and "released" in first_err and "retried" in both
    listed = run_cli("jobq", "dead", *config, "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [row["kind"] for row in json.loads(listed.stdout)] == ["bad"]
    assert tenant["password"] not in both + listed.stderr
    asyncio.run(refused(tenant, queue_name))
    vhosts = subprocess.run(["rabbitmqctl", "list_user_permissions", "-q", "--no-table-headers",
                             tenant["user"]], capture_output=True, text=True, timeout=60).stdout
    assert [line.split("\t")[0] for line in vhosts.splitlines()] == [tenant["vhost"]]


async def refused(tenant: dict[str, str], queue_name: str) -> None:
    """What the user must not do: declare other queues (and it has no other vhost at all)."""
    connection = await aio_pika.connect(tenant["url"])
    async with connection:
        for name in ("other", f"{queue_name}x"):
            channel = await connection.channel()
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
                await channel.declare_queue(name, durable=True)
