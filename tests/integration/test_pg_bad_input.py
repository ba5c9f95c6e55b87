"""Bad input on the real PostgreSQL: each bad row ends dead with a reason naming the problem,
the consumer goes on; what enqueue can refuse, it refuses with a clear error and inserts nothing.

Not JSON and not UTF-8 cannot reach a Postgres consumer (the column is jsonb in a UTF-8
database); the decoder still handles them, see tests/unit/test_bad_input.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobq.api import connect_publisher
from jobq.config import load_settings
from jobq.core.errors import JobTooLarge, MalformedJob
from jobq.core.port import NewJob
from tests.conftest import ROOT, fetch, pg_args, run_cli, schema_env
from tests.integration.test_postgres import produce, status_counts

DEEP = "[" * 3000 + "]" * 3000  # PostgreSQL stores it; Python's json cannot parse it
BAD_ROWS = [  # (kind, payload, headers, the reason it must be dead-lettered with)
    ("demo", '{"a": ' + DEEP + "}", "{}", "MalformedJob: payload is nested too deeply to decode"),
    ("demo", json.dumps({"pad": "x" * 8000}), "{}",
     "MalformedJob: payload is 8,011 bytes as JSON, over the limit of 7,000 (limits.max_payload)"),
    ("demo", "{}", json.dumps({"h": "x" * 100_000}),
     "MalformedJob: headers are 100,009 bytes as JSON, over the limit of 65,536 (limits.max_headers)"),
    ("mystery", "{}", "{}",
     "UnknownKind: no processor for kind 'mystery' (known kinds: demo; no default processor)"),
]
# What the schema refuses (migration 13, jobs_runnable_check): the INSERT fails, nothing is stored.
REFUSED = [("demo", "[1, 2]", "{}"), ("demo", '"text"', "{}"), ("demo", "{}", "[]"),
           ("", "{}", "{}"), ("k" * 201, "{}", "{}")]


def routed_config(tmp_path: Path) -> Path:
    """A config that routes kind 'demo' to the completion record and has no default processor."""
    path = tmp_path / "routed.yaml"
    path.write_text(f"extends: {ROOT / 'configs' / 'postgres.yaml'}\n"
                    "consumer:\n  processor: ''\n  processors:\n"
                    "    demo: {processor: 'tests.processors:record', "
                    f"args: {{directory: '{tmp_path}'}}}}\n")
    return path


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_every_bad_row_is_dead_lettered_with_its_reason_and_the_good_ones_run(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path, claim: str) -> None:
    insert = sql.SQL("INSERT INTO {} (queue, kind, payload, headers) "
                     "VALUES (%s, %s, %s::jsonb, %s::jsonb) RETURNING id").format(
        sql.Identifier(schema, "jobs"))
    bad_ids = {}
    produce(schema, queue_name, 3, "--kind", "demo")
    for kind, payload, headers, reason in BAD_ROWS:
        ((job_id,),) = fetch(pg_dsn, insert, [queue_name, kind, payload, headers])
        bad_ids[job_id] = reason
    for kind, payload, headers in REFUSED:
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_runnable_check"):
            fetch(pg_dsn, insert, [queue_name, kind, payload, headers])
    # A nested header value is no reason to refuse a job: the handler gets its JSON text.
    fetch(pg_dsn, insert, [queue_name, "demo", "{}", '{"h": [1]}'])
    produce(schema, queue_name, 2, "--kind", "demo")
    env = schema_env(schema, JOBQ_LIMITS__MAX_PAYLOAD="7000", JOBQ_POSTGRES__CLAIM=claim)
    result = run_cli("consumer", "--config", str(routed_config(tmp_path)), "--queue", queue_name,
                     "--once", "-n", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert status_counts(pg_dsn, schema, queue_name) == {"done": 6, "dead": len(BAD_ROWS)}
    dead = dict(fetch(pg_dsn, sql.SQL("SELECT id, last_error FROM {} WHERE status = 'dead'").format(
        sql.Identifier(schema, "jobs"))))
    assert dead == bad_ids
    recorded = [line for f in tmp_path.glob("*.log") for line in f.read_text().split()]
    assert len(recorded) == 6  # the six good jobs, before and after the bad ones
    listed = run_cli("jobq", "dead", "list", "--json", *pg_args(queue_name), env=env)
    assert listed.returncode == 0, listed.stderr  # even the payload Python cannot parse is shown
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert {i: row["last_error"] for i, row in rows.items()} == bad_ids
    deep_id = next(i for i, reason in bad_ids.items() if "nested too deeply" in reason)
    assert rows[deep_id]["payload"].startswith('{"a": [[[[') and "characters)" in rows[deep_id]["payload"]


def test_enqueue_refuses_what_breaks_the_limits_and_inserts_nothing(
        pg_dsn: str, schema: str, queue_name: str) -> None:
    settings = load_settings(ROOT / "configs" / "postgres.yaml", {
        "postgres.schema": schema, "queue": queue_name, "postgres.dsn": pg_dsn}, env={})
    refused = [
        (NewJob(kind="k", payload={"pad": "x" * 1_048_576}), JobTooLarge,
         "payload is 1,048,587 bytes as JSON, over the limit of 1,048,576 (limits.max_payload)"),
        (NewJob(kind="k", headers={"h": "x" * 70_000}), JobTooLarge,
         "headers are 70,009 bytes as JSON, over the limit of 65,536 (limits.max_headers)"),
        (NewJob(kind="k", payload={"s": "nul\x00"}), MalformedJob, "NUL character"),
        (NewJob(kind="", payload={}), MalformedJob, "kind is empty"),
    ]

    async def attempt() -> list[str]:
        messages = []
        async with connect_publisher(settings) as publisher:
            for job, error, words in refused:
                with pytest.raises(error) as info:
                    await publisher.enqueue_many([NewJob(kind="fine"), job])  # all or nothing
                assert words in str(info.value)
                messages.append(str(info.value))
        return messages

    asyncio.run(attempt())
    assert status_counts(pg_dsn, schema, queue_name) == {}
    result = run_cli("producer", *pg_args(queue_name), "--count", "2", "--payload-size", "2000000",
                     env=schema_env(schema))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "jobq: job refused: payload is 2,000,019 bytes as JSON, over the limit of 1,048,576 "
        "(limits.max_payload)")
    assert status_counts(pg_dsn, schema, queue_name) == {}
