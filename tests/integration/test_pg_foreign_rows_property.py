"""Property test (Hypothesis) of docs/wire-format.md on the real PostgreSQL: arbitrary rows, as
any SQL client can write them, beside good jobs (issue 37).

Each example inserts good jobs, then rows whose every column holds a value its type admits
(NULL, negative, zero, the integer's ends, 'infinity' and times Python cannot hold, empty and
long text, JSON that is not an object, nested junk, unknown states, ids below one ...), then
more good jobs, and runs a real ``consumer --once`` in one claim mode or the other. Then:

- an INSERT either went in, or was refused by the schema (a CHECK of migration 13, a NOT NULL,
  the unique key index), and then nothing of it is stored;
- the consumer exits 0 and every good job ran exactly once;
- every row that went in and was due is done (ran once) or dead with its reason, by the rules:
  attempts used up (attempts >= max_attempts) is dead; a row of another state is left to its
  state's rules, never run by a consumer that does not hold it;
- the admin's views (``jobs show`` of every row, ``jobs list`` of every state, ``dead list``,
  the depth of ``jobq stats``) read every row.

Why Hypothesis: it draws each column from the whole space of its type, combines them, and keeps
a failing example small, which hand-written generators would do worse. The budget is fixed and
the draws derandomised, so `make test` runs the same few examples each time, in seconds.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from jobq.config import load_settings
from jobq.wiring.container import admin_of
from tests.conftest import PG_DSN, ROOT, fetch, pg_args, run_cli, schema_env
from tests.processors import lines

INT32 = 2**31 - 1
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=12)
long_texts = st.integers(190, 260).map(lambda n: "k" * n)
json_scalars = (st.none() | st.booleans() | st.integers(-(10**30), 10**30)
                | st.floats(allow_nan=False, allow_infinity=False) | texts)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=8)
json_texts = (st.dictionaries(texts, json_values, max_size=4) | json_values).map(json.dumps)
times = st.sampled_from([
    "now()", "now() - interval '1 hour'", "now() + interval '1 hour'", "'infinity'", "'-infinity'",
    "'0001-01-01 00:00:00+00'", "'0001-01-02 00:00:00+00'", "'1970-01-01'", "'4000-01-01'",
    "'9999-12-30 00:00:00+00'", "'9999-12-31 23:59:59+00'", "'20000-01-01'", "'0044-03-15 BC'",
])
# Each column: None leaves it to its default; otherwise a value its type admits.
COLUMNS: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.none() | st.just("") | st.just("foreign") | texts | long_texts,
    "payload": st.none() | json_texts | st.just('{"n": ' + "9" * 5000 + "}"),
    "headers": st.none() | json_texts,
    "status": st.none() | st.sampled_from(["pending", "running", "done", "dead", "cancelled",
                                           "paused", ""]),
    "attempts": st.none() | st.sampled_from([-(2**31), -1, 0, 1, 4, 5, 6, INT32]),
    "max_attempts": st.none() | st.sampled_from([-1, 0, 1, 5, INT32]),
    "priority": st.none() | st.sampled_from([-(2**15), -1, 0, 9, 10, 2**15 - 1]),
    "run_at": st.none() | times,
    "created_at": st.none() | times,
    "locked_until": st.none() | times,
    "finished_at": st.none() | times,
    "locked_by": st.none() | texts,
    "key": st.none() | st.sampled_from(["k1", "k2", ""]),
    "isolate": st.none() | st.booleans(),
    "errors": st.none() | json_texts,
    "last_error": st.none() | texts,
    "id": st.none() | st.sampled_from([-(2**63), -1, 0, 2**63 - 1]),
}
TIME_COLUMNS = ("run_at", "created_at", "locked_until", "finished_at")
# A few columns set per row, so that most rows get in and each shows what its values do.
rows = st.lists(st.sampled_from(list(COLUMNS)), max_size=4, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: COLUMNS[name] for name in names})).map(
    lambda row: {k: v for k, v in row.items() if v is not None})


def insert(conn: psycopg.Connection[Any], schema: str, queue: str, row: dict[str, Any]) -> int | None:
    """The row inserted as a foreign writer would (its times as SQL expressions); its id, or
    None where the schema refused it (then nothing of it is stored)."""
    row = {"kind": "foreign", "payload": "{}", **row, "queue": queue}
    values = [sql.SQL(v) if k in TIME_COLUMNS else sql.Literal(v) for k, v in row.items()]
    statement = sql.SQL("INSERT INTO {} ({}) {} VALUES ({}) RETURNING id").format(
        sql.Identifier(schema, "jobs"), sql.SQL(", ").join(map(sql.Identifier, row)),
        sql.SQL("OVERRIDING SYSTEM VALUE" if "id" in row else ""), sql.SQL(", ").join(values))
    try:
        ((job_id,),) = conn.execute(statement).fetchall()
    except (psycopg.errors.IntegrityError, psycopg.errors.DataError) as exc:
        # A CHECK, NOT NULL or unique key; a time or number the type itself refuses.
        assert not isinstance(exc, psycopg.errors.ForeignKeyViolation)
        return None
    return int(job_id)


def good(conn: psycopg.Connection[Any], schema: str, queue: str, count: int) -> list[int]:
    statement = sql.SQL("INSERT INTO {} (queue, kind, payload) SELECT %s, 'good', '{{}}' "
                        "FROM generate_series(1, %s) RETURNING id").format(
        sql.Identifier(schema, "jobs"))
    return [int(r[0]) for r in conn.execute(statement, [queue, count]).fetchall()]


async def look(schema: str, queue: str, ids: Sequence[int]) -> None:
    """What `jobq jobs show/list`, `jobq dead list` and `jobq stats` read, for every row."""
    config = load_settings(ROOT / "configs" / "postgres.yaml", {
        "queue": queue, "postgres.schema": schema, "postgres.dsn": PG_DSN,
        "connect.attempts": 1}, env={})
    async with admin_of(config) as admin:
        for job_id in ids:
            assert (await admin.show_job(str(job_id))).id == job_id
        for state in ("pending", "running", "dead", "done", "cancelled"):
            await admin.list_jobs(state)
        await admin.dead_list()
        await admin.depth()


@pytest.fixture(scope="module")
def shared_schema() -> Any:
    """One schema for every example (each has a queue of its own): a schema per example would
    spend the budget on `jobq init`."""
    from tests.conftest import init_queue, need_service

    need_service("PostgreSQL", "127.0.0.1", 5432)
    name = f"t_{uuid.uuid4().hex[:10]}"
    init_queue("postgres", "q", schema_env(name))
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(foreign=st.lists(rows, min_size=3, max_size=10),
       claim=st.sampled_from(["lease", "transaction"]))
@example(foreign=[  # each class of value that got in before and broke something
    {"attempts": INT32, "max_attempts": INT32}, {"attempts": 7, "max_attempts": 3},
    {"id": -1}, {"id": 0}, {"headers": '{"h": {"n": [1, null]}, "z": null, "b": true}'},
    {"payload": '{"n": ' + "9" * 5000 + "}"}, {"run_at": "'9999-12-30 00:00:00+00'"},
    {"locked_until": "'4000-01-01'", "locked_by": "x"}, {"priority": 9}, {"isolate": True},
    {"status": "running", "locked_until": "now() - interval '1 hour'", "locked_by": "gone/1"},
    {"status": "dead", "payload": "[1]", "errors": '{"not": "a list"}'},
    {"status": "cancelled", "kind": ""}, {"status": "done", "finished_at": "'0001-01-02 00:00:00+00'"},
], claim="transaction")
@example(foreign=[{"attempts": INT32, "max_attempts": INT32}, {"attempts": 5, "max_attempts": 5},
                  {"id": -(2**63)}, {"headers": '{"h": [1]}'}, {"key": ""}, {"status": "paused"},
                  {"run_at": "'infinity'"}, {"created_at": "'-infinity'"}], claim="lease")
def test_arbitrary_rows_beside_good_jobs(shared_schema: str, tmp_path_factory: Any,
                                         foreign: list[dict[str, Any]], claim: str) -> None:
    schema, queue = shared_schema, f"q-{uuid.uuid4().hex[:10]}"
    records = tmp_path_factory.mktemp("records")
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        goods = good(conn, schema, queue, 2)
        inserted = [insert(conn, schema, queue, row) for row in foreign]
        goods += good(conn, schema, queue, 2)
    ids = [i for i in inserted if i is not None]
    event(f"{len(foreign) - len(ids)} of {len(foreign)} refused")
    table = sql.Identifier(schema, "jobs")
    before = {int(r[0]): r[1:] for r in fetch(PG_DSN, sql.SQL(
        "SELECT id, status, run_at <= now(), attempts >= max_attempts FROM {} WHERE queue = %s")
        .format(table), [queue])}
    assert len(before) == len(goods) + len(ids)  # a refused INSERT stored nothing

    result = run_cli("consumer", *pg_args(queue), "--once", "-n", "3",
                     "-p", "tests.processors:record", "--processor-arg", f"directory={records}",
                     env=schema_env(schema, JOBQ_POSTGRES__CLAIM=claim), timeout=60)
    assert result.returncode == 0, result.stderr
    ran = [int(line) for line in lines(records, "log")]
    after = {int(r[0]): (r[1], r[2]) for r in fetch(PG_DSN, sql.SQL(
        "SELECT id, status, last_error FROM {} WHERE queue = %s").format(table), [queue])}
    for job_id in goods:
        assert after[job_id] == ("done", None) and ran.count(job_id) == 1, (job_id, after[job_id])
    for job_id in ids:
        status, due, spent = before[job_id]
        end, error = after[job_id]
        event(f"{status}{'' if due else ' not due'}{' spent' if spent else ''} -> {end}")
        if status != "pending":  # not a consumer's to run: no consumer held it
            assert ran.count(job_id) == 0 and end in (status, "pending", "dead", "cancelled")
        elif not due:
            assert (end, ran.count(job_id)) == ("pending", 0)
        elif spent:
            assert end == "dead" and "over max_attempts" in str(error), (job_id, end, error)
            assert ran.count(job_id) == 0
        else:
            assert (end == "done" and ran.count(job_id) == 1) or (
                end == "dead" and error and ran.count(job_id) == 0), (job_id, end, error)
    asyncio.run(look(schema, queue, [*goods, *ids]))


def test_the_property_test_sees_a_refusal(pg_dsn: str, schema: str, queue_name: str,
                                          tmp_path: Path) -> None:
    """The oracle's own check: a row the schema refuses is refused by ``insert``."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert insert(conn, schema, queue_name, {"run_at": "'infinity'"}) is None
        assert insert(conn, schema, queue_name, {"payload": "[1]"}) is None
        assert insert(conn, schema, queue_name, {"headers": '{"h": {"n": 1}}'}) is not None
