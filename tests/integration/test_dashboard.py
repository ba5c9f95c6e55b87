"""`jobq dashboard` against the real servers, through the real CLI and HTTP.

Both backends in one dashboard: the queues and their dead jobs show, a payload holding
``<script>`` shows as text, every action is refused without the token's session and its
CSRF token (or from another origin), a requeue with them brings the dead job back and a
consumer runs it; a read-only dashboard acts on nothing; a backend that is down is a banner
on its queue while the other one is served.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from psycopg import sql

from tests.conftest import PG_DSN, ROOT, fetch, jobs_table, schema_env, start_cli, wait_until
from tests.contract.backends import Backend, publish_raw

TOKEN = "a-test-token"
SCRIPT = "<script>alert(1)</script>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Dashboard:
    def __init__(self, queue: str, env: dict[str, str], *extra: str) -> None:
        self.port = free_port()
        self.proc = start_cli("jobq", "dashboard", "--config", str(ROOT / "configs/postgres.yaml"),
                              "--config", str(ROOT / "configs/rabbitmq.yaml"), "--queue", queue,
                              "--port", str(self.port), *extra, env=env)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=20)
        assert wait_until(self._up, 20), self.stop()

    def _up(self) -> bool:
        try:
            return self.client.get("/login").status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> str:
        self.client.close()
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return err


def csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, page[:2000]
    return match.group(1)


@pytest.fixture
def board(schema: str, queue_name: str, amqp_url: str) -> Iterator[tuple[Dashboard, Backend,
                                                                         Backend]]:
    env = schema_env(schema, JOBQ_DASHBOARD__TOKEN=TOKEN)
    pg = Backend("postgres", queue_name, dict(env), schema=schema)
    rabbit = Backend("rabbitmq", queue_name, dict(env))
    assert rabbit.run("jobq", "init").returncode == 0
    try:
        dashboard = Dashboard(queue_name, env)
        try:
            yield dashboard, pg, rabbit
        finally:
            dashboard.stop()
    finally:
        rabbit.cleanup()


def test_find_a_dead_job_requeue_it_and_see_it_done(board: tuple[Dashboard, Backend, Backend]
                                                    ) -> None:
    dashboard, pg, rabbit = board
    assert pg.schema is not None
    (dead,) = fetch(PG_DSN, sql.SQL(
        "INSERT INTO {} (queue, kind, payload, status, attempts, last_error, finished_at) "
        "VALUES (%s, 'mail', %s, 'dead', 5, 'SMTPError: 550 no such user', now()) RETURNING id"
    ).format(jobs_table(pg.schema)), [pg.queue, json.dumps({"html": SCRIPT})])[0]
    asyncio.run(publish_raw(rabbit.queue, b'{"n": 1}', message_id="rmq-1", kind="report"))
    assert rabbit.run("consumer", "--once", "-p", "fail", "--max-attempts", "1").returncode == 0
    client = dashboard.client

    home = client.get("/")
    assert home.status_code == 200 and home.text.count(pg.queue) >= 2, home.text
    assert client.get("/queues/7").status_code == 404  # two queues configured
    assert "unreachable" not in home.text
    listed = client.get("/queues/0", params={"state": "dead"}).text
    assert f"/queues/0/jobs/{dead}" in listed and "SMTPError: 550 no such user" in listed
    page = client.get(f"/queues/0/jobs/{dead}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and SCRIPT not in page
    assert "log in to act" in page and 'name="csrf"' not in page  # no forms before a login

    assert client.post("/queues/0/act", data={"action": "requeue", "id": str(dead)}
                       ).status_code == 403
    assert client.post("/login", data={"token": "wrong"}).status_code == 403
    assert client.post("/login", data={"token": TOKEN}).status_code == 303
    token = csrf(client.get(f"/queues/0/jobs/{dead}").text)
    assert client.post("/queues/0/act", data={"action": "requeue", "id": str(dead),
                                              "csrf": "0" * 64}).status_code == 403
    assert client.post("/queues/0/act", data={"action": "requeue", "id": str(dead),
                                              "csrf": token},
                       headers={"Origin": "http://evil.example"}).status_code == 403
    done = client.post("/queues/0/act", data={"action": "requeue", "id": str(dead),
                                              "csrf": token}, follow_redirects=True)
    assert done.status_code == 200 and "requeued 1 dead jobs" in done.text, done.text
    assert pg.run("consumer", "--once", "-p", "noop").returncode == 0
    assert ">done<" in client.get(f"/queues/0/jobs/{dead}").text.replace(" ", "")

    rabbit_dead = client.get("/queues/1").text  # RabbitMQ lists its dead letters
    assert "/queues/1/jobs/rmq-1" in rabbit_dead
    shown = client.get("/queues/1/jobs/rmq-1").text  # its attempt's error, traceback and all
    assert "<h2>Errors</h2>" in shown and "attempt 1" in shown, shown
    assert "jobq.core.errors.PermanentError" in shown and "raise PermanentError(message)" in shown
    done = client.post("/queues/1/act", data={"action": "requeue", "id": "rmq-1",
                                              "csrf": token}, follow_redirects=True)
    assert "requeued 1 dead jobs" in done.text
    assert rabbit.run("consumer", "--once", "-p", "noop").returncode == 0
    assert rabbit.dead() == []
    paused = client.post("/queues/0/act", data={"action": "pause", "csrf": token},
                         follow_redirects=True)
    assert "queue paused" in paused.text and "Paused" in paused.text

    # Odd input fails that request alone: an id of digits not ASCII (before: a 500 path that
    # closed the pool and showed the queue down to everyone), an empty id for a per-job action
    # (never "all"), a job id with a slash (a foreign producer's), a Host of another name.
    odd = client.get("/queues/0/jobs/%C2%B2")
    assert odd.status_code == 404 and "not a job id" in odd.text
    assert "unreachable" not in client.get("/").text
    empty = client.post("/queues/0/act", data={"action": "purge", "id": " ", "csrf": token},
                        follow_redirects=True)
    assert "which job?" in empty.text
    asyncio.run(publish_raw(rabbit.queue, b'{"n": 2}', message_id="a/b?c", kind="odd"))
    assert rabbit.run("consumer", "--once", "-p", "fail", "--max-attempts", "1").returncode == 0
    listed = client.get("/queues/1", params={"state": "dead"}).text
    assert "/queues/1/jobs/a%2Fb%3Fc" in listed
    assert "odd" in client.get("/queues/1/jobs/a%2Fb%3Fc").text
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 400


def test_read_only_and_a_backend_down(schema: str, queue_name: str, amqp_url: str) -> None:
    env = schema_env(schema, JOBQ_DASHBOARD__TOKEN=TOKEN,
                     JOBQ_PG_DSN="postgresql://postgres@127.0.0.1:1/test")  # nothing listens
    rabbit = Backend("rabbitmq", queue_name, dict(env))
    assert rabbit.run("jobq", "init").returncode == 0
    dashboard = Dashboard(queue_name, env, "--read-only")
    try:
        began = time.monotonic()
        home = dashboard.client.get("/")
        assert home.status_code == 200, home.text
        assert time.monotonic() - began < 5
        assert "unreachable" in home.text and "127.0.0.1:1" in home.text
        assert "ready 0" in home.text  # the RabbitMQ queue is served beside it
        assert "read-only" in home.text and "log in" not in home.text
        assert dashboard.client.post("/login", data={"token": TOKEN}).status_code == 403
        refused = dashboard.client.post("/queues/1/act", data={"action": "pause"})
        assert refused.status_code == 403 and "read-only" in refused.text
    finally:
        err = dashboard.stop()
        rabbit.cleanup()
    assert TOKEN not in err  # never printed




def test_the_throughput_chart_comes_from_the_consumers_metrics(schema: str, queue_name: str,
                                                               amqp_url: str) -> None:
    env = schema_env(schema, JOBQ_DASHBOARD__SAMPLE_INTERVAL="0.5")
    pg = Backend("postgres", queue_name, dict(env), schema=schema)
    rabbit = Backend("rabbitmq", queue_name, dict(env))
    assert rabbit.run("jobq", "init").returncode == 0
    port = free_port()
    consumer = pg.start("consumer", "-p", "noop", "--metrics-port", str(port))
    producer = pg.start("producer", "--count", "3000", "--rate", "300")
    dashboard = Dashboard(queue_name, env, "--metrics", f"http://127.0.0.1:{port}/metrics")
    try:
        def charted() -> bool:
            page = dashboard.client.get("/queues/0").text
            match = re.search(r"jobs done per second \(the consumers&#39; metrics\) over the "
                              r"last [0-9.]+ min \(top ([0-9.]+)\)", page)
            return match is not None and float(match.group(1)) > 50
        assert wait_until(charted, 20, step=0.5), dashboard.client.get("/queues/0").text[-3000:]
        home = dashboard.client.get("/").text
        assert "done per second" in home and "waiting jobs over the last" in home
    finally:
        dashboard.stop()
        for process in (producer, consumer):
            process.terminate()
            process.communicate(timeout=30)
        rabbit.cleanup()
