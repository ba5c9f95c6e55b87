"""Security on the real PostgreSQL: the least-privilege grants of docs/security.md are enough (and
no more), hostile schema names stay identifiers, TLS settings in the DSN reach libpq."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql

from jobq.api import resolve, wired
from jobq.config import load_settings
from jobq.core.errors import ConfigError
from jobq.core.port import NewJob
from tests.conftest import ROOT, cli_env, fetch, run_cli, start_cli, stop_cli, wait_until
from tests.integration.test_postgres import status_counts
from tests.processors import completions

GRANTS = re.search(r"<!-- grants:begin -->\s*```sql\n(.*?)```", (ROOT / "docs" / "security.md").read_text(),
                   re.DOTALL)
RETENTION_GRANTS = re.search(r"<!-- retention-grants:begin -->\s*```sql\n(.*?)```",
                             (ROOT / "docs" / "security.md").read_text(), re.DOTALL)
SCHEDULES_GRANTS = re.search(r"<!-- schedules-grants:begin -->\s*```sql\n(.*?)```",
                             (ROOT / "docs" / "security.md").read_text(), re.DOTALL)


DATABASE_ACL = 7_310_001  # advisory lock key: one change of the test database's ACL at a time


def documented(block: str, schema: str, roles: dict[str, str]) -> str:
    """A grants block of docs/security.md for this test's schema and roles."""
    return (block.replace("SCHEMA jobq ", f"SCHEMA {schema} ").replace("jobq.", f"{schema}.")
            .replace("jobq_producer", roles["producer"]).replace("jobq_consumer", roles["consumer"]))


def dsn_for(role: str) -> str:
    return f"postgresql://{role}@127.0.0.1:5432/test"


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[dict[str, str]]:
    """Owner, producer and consumer login roles (trust auth), and a schema name; all removed after."""
    tag = uuid.uuid4().hex[:8]
    names = {"owner": f"jq_owner_{tag}", "producer": f"jq_producer_{tag}",
             "consumer": f"jq_consumer_{tag}", "schema": f"t_sec_{tag}"}
    # Tests running at once change the database's ACL (this GRANT, the DROP OWNED below): two
    # such changes together fail with "tuple concurrently updated", so they take turns.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [DATABASE_ACL])
        for who in ("owner", "producer", "consumer"):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(names[who])))
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE test TO {}").format(sql.Identifier(names["owner"])))
    yield names
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [DATABASE_ACL])
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names["schema"])))
        for who in ("consumer", "producer", "owner"):
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(names[who])))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(names[who])))


def as_role(role: str, schema: str, **extra: str) -> dict[str, str]:
    return cli_env(JOBQ_PG_DSN=dsn_for(role), JOBQ_POSTGRES__SCHEMA=schema, **extra)


def execute(dsn: str, statement: sql.Composable) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def denied(role: str, statement: sql.Composable) -> bool:
    with psycopg.connect(dsn_for(role), autocommit=True) as conn:
        try:
            conn.execute(statement)
        except errors.InsufficientPrivilege:
            return True
    return False


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_the_documented_grants_are_enough_for_producer_and_consumer_and_no_more(
        pg_dsn: str, roles: dict[str, str], queue_name: str, tmp_path: Path, claim: str) -> None:
    assert GRANTS, "docs/security.md lost its grants block"
    schema = roles["schema"]
    config = ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", queue_name]
    init = run_cli("jobq", "init", *config, env=as_role(roles["owner"], schema))
    assert init.returncode == 0, init.stderr
    grants = documented(GRANTS.group(1), schema, roles)
    with psycopg.connect(dsn_for(roles["owner"]), autocommit=True) as conn:
        conn.execute(grants.encode())  # the owner grants, as the page says
    producer = as_role(roles["producer"], schema, JOBQ_LIMITS__MAX_PENDING="100")  # uses SELECT too
    for kind, count in (("demo", "12"), ("bad", "2")):
        made = run_cli("producer", *config, "--count", count, "--kind", kind, "--max-attempts", "30",
                       env=producer)
        assert made.returncode == 0, made.stderr
    # Claims, acks, retries (fail_rate), dead letters (kind bad), heartbeats and rescues (lease 1 s).
    consumer_env = as_role(roles["consumer"], schema, JOBQ_POSTGRES__LEASE="1",
                           JOBQ_POSTGRES__RESCUE_INTERVAL="0.2", JOBQ_POSTGRES__CLAIM=claim)
    proc = start_cli("consumer", *config, "-p", "tests.processors:record", "-a", f"directory={tmp_path}",
                     "-a", "sleep_ms=100", "-a", "fail_rate=0.3", "-a", "fail_kind=bad", "-n", "2",
                     env=consumer_env)
    try:
        assert wait_until(lambda: status_counts(pg_dsn, schema, queue_name) == {"done": 12, "dead": 2}, 30)
        more = run_cli("producer", *config, "--count", "20", "--kind", "demo", env=producer)
        assert more.returncode == 0, more.stderr
        assert wait_until(lambda: len(completions(tmp_path)) >= 14, 15)
    finally:
        proc.send_signal(signal.SIGTERM)  # releases what it holds unstarted: an UPDATE too
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "permission denied" not in err and "retried" in err
    assert claim == "transaction" or "released" in err  # lease mode hands back what it buffered
    jobs = sql.Identifier(schema, "jobs")
    consumer, producer_role = roles["consumer"], roles["producer"]
    assert denied(consumer, sql.SQL("INSERT INTO {} (queue, kind, payload) VALUES ('q', 'k', '{{}}')")
                  .format(jobs))
    assert denied(consumer, sql.SQL("DELETE FROM {}").format(jobs))
    assert denied(consumer, sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(schema, "x")))
    assert denied(producer_role, sql.SQL("UPDATE {} SET status = 'done'").format(jobs))
    assert denied(producer_role, sql.SQL("DELETE FROM {}").format(jobs))


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_a_consumer_short_of_a_grant_exits_2_naming_it(roles: dict[str, str], claim: str) -> None:
    schema, consumer = roles["schema"], roles["consumer"]
    config = ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", "q"]
    assert run_cli("jobq", "init", *config, env=as_role(roles["owner"], schema)).returncode == 0
    execute(dsn_for(roles["owner"]), sql.SQL("GRANT USAGE ON SCHEMA {0} TO {1}; GRANT SELECT ON {2} TO {1}")
            .format(sql.Identifier(schema), sql.Identifier(consumer), sql.Identifier(schema, "jobs")))
    result = run_cli("consumer", *config, "--once", "-p", "noop",
                     env=as_role(consumer, schema, JOBQ_POSTGRES__CLAIM=claim))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    jobs = sql.Identifier(schema, "jobs").as_string(None)
    assert last.startswith(f"jobq: config error: postgres role '{consumer}' lacks UPDATE on {jobs}")
    assert "docs/security.md" in last and "Traceback" not in result.stderr


def initialised(roles: dict[str, str], queue: str) -> tuple[list[str], Callable[[str], None]]:
    """``jobq init`` as the owner and the main grants of docs/security.md; the CLI arguments,
    and a function that applies another block of the page as the owner."""
    assert GRANTS is not None
    config = ["--config", str(ROOT / "configs" / "postgres.yaml"), "--queue", queue]
    assert run_cli("jobq", "init", *config, env=as_role(roles["owner"], roles["schema"])).returncode == 0

    def grant(block: str) -> None:  # as the owner, as the page says
        with psycopg.connect(dsn_for(roles["owner"]), autocommit=True) as conn:
            conn.execute(documented(block, roles["schema"], roles).encode())

    grant(GRANTS.group(1))
    return config, grant


def test_a_pruning_consumer_needs_the_documented_delete_grant(
        pg_dsn: str, roles: dict[str, str], queue_name: str) -> None:
    assert GRANTS and RETENTION_GRANTS, "docs/security.md lost a grants block"
    schema, consumer = roles["schema"], roles["consumer"]
    config, grant = initialised(roles, queue_name)
    env = as_role(consumer, schema, JOBQ_POSTGRES__RETENTION__DONE="1s")
    refused = run_cli("consumer", *config, "--once", "-p", "noop", env=env)
    jobs = sql.Identifier(schema, "jobs").as_string(None)
    assert refused.returncode == 2 and (
        f"lacks DELETE on {jobs}, which a consumer with postgres.retention needs"
        in refused.stderr), refused.stderr
    grant(RETENTION_GRANTS.group(1))
    made = run_cli("producer", *config, "--count", "5", env=as_role(roles["producer"], schema))
    assert made.returncode == 0, made.stderr
    ran = run_cli("consumer", *config, "--once", "-p", "noop", env=env)
    assert ran.returncode == 0, ran.stderr
    time.sleep(1.1)  # the jobs' 1 s of retention
    pruned = run_cli("jobq", "prune", *config, env=env)  # the pruner's statements, as that role
    assert (pruned.returncode, pruned.stdout.split()[:2]) == (0, ["pruned", "5"]), pruned.stderr


def test_a_consumer_with_schedules_needs_the_documented_grants(
        pg_dsn: str, roles: dict[str, str], queue_name: str) -> None:
    assert GRANTS and SCHEDULES_GRANTS, "docs/security.md lost a grants block"
    schema, consumer = roles["schema"], roles["consumer"]
    config, grant = initialised(roles, queue_name)
    env = as_role(consumer, schema, JOBQ_SCHEDULES__BEAT__EVERY="1s",
                  JOBQ_SCHEDULES__BEAT__KIND="beat")
    refused = run_cli("consumer", *config, "--once", "-p", "noop", env=env)
    assert refused.returncode == 2 and "which a consumer with schedules needs" in refused.stderr, (
        refused.stderr)
    grant(SCHEDULES_GRANTS.group(1))
    ran = start_cli("consumer", *config, "-p", "noop", env=env)
    try:
        ticks = sql.SQL("SELECT count(*) FROM {} WHERE kind = 'beat'").format(
            sql.Identifier(schema, "jobs"))
        assert wait_until(lambda: fetch(dsn_for(roles["owner"]), ticks)[0][0] >= 1, 10)
    finally:
        stop_cli(ran, 20)


def test_a_schema_name_with_quotes_and_sql_is_only_ever_an_identifier(pg_dsn: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    sentinel = f"t_sentinel_{tag}"
    hostile = f't"; DROP TABLE {sentinel}.victim; --'
    with pytest.raises(ConfigError, match=r"postgres\.schema: bad value"):
        load_settings(None, {"postgres.schema": hostile}, env={})  # refused by validation ...
    base = load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.dsn": pg_dsn, "queue": "q", "consumer.once": True, "log.level": "warning",
        "consumer.processor": "tests.processors:record",
        "consumer.processor_args": {"directory": str(tmp_path)}}, env={})
    settings = dataclasses.replace(base, postgres=dataclasses.replace(base.postgres, schema=hostile))

    async def everything() -> list[str]:  # ... and if validation is bypassed, still harmless
        async with wired(settings) as container:
            admin = await resolve(container.admin())
            await admin.init()
            publisher = await resolve(container.publisher())
            ids = await publisher.enqueue_many([NewJob(kind="k", payload={"n": i}) for i in range(5)])
            transport = await resolve(container.transport())
            pool = await resolve(container.worker_pool())
            await transport.open()
            try:
                await pool.run()
            finally:
                await transport.close()
            return list(ids)

    try:
        execute(pg_dsn, sql.SQL("CREATE SCHEMA {0}; CREATE TABLE {0}.victim (x int)").format(
            sql.Identifier(sentinel)))
        ids = asyncio.run(everything())
        assert sorted(completions(tmp_path)) == sorted(ids)
        victim = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(sentinel, "victim"))
        assert fetch(pg_dsn, victim) == [(0,)]  # still there
        assert fetch(pg_dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", [hostile]) == [(1,)]
    finally:
        execute(pg_dsn, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE; DROP SCHEMA IF EXISTS {} CASCADE")
                .format(sql.Identifier(hostile), sql.Identifier(sentinel)))


def test_sslmode_in_the_dsn_reaches_libpq(pg_dsn: str, schema: str) -> None:
    ((ssl,),) = fetch(pg_dsn, "SHOW ssl")
    dsn = "postgresql://postgres:s3cret@127.0.0.1:5432/test?sslmode=require"
    env = cli_env(JOBQ_PG_DSN=dsn, JOBQ_POSTGRES__SCHEMA=schema, JOBQ_CONNECT__ATTEMPTS="2",
                  JOBQ_CONNECT__BACKOFF_BASE="0.1")
    result = run_cli("consumer", "--config", str(ROOT / "configs" / "postgres.yaml"), "--once", "-p",
                     "noop", env=env)
    assert "s3cret" not in result.stderr
    if ssl == "on":  # a server with TLS: the connection is encrypted
        assert result.returncode == 0, result.stderr
        return
    # This server has TLS off, so libpq refuses: proof that sslmode got there. A mistake, not
    # an outage: exit 2 at once, not retried.
    assert result.returncode == 2
    assert "server does not support SSL, but SSL was required" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "jobq: PostgreSQL at 127.0.0.1:5432 refused the connection")
    assert "WARNING" not in result.stderr
