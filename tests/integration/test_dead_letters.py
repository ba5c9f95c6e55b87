"""`jobq dead list|requeue|purge` on jobs dead-lettered by either Postgres claim mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from psycopg import sql

from tests.conftest import fetch, pg_args, run_cli, schema_env
from tests.processors import completions

RECORD = "tests.processors:record"
UNKNOWN = "999999999"


def jobs(dsn: str, schema: str) -> dict[int, tuple[str, str, int]]:
    """id -> (kind, status, attempts)."""
    rows = fetch(dsn, sql.SQL("SELECT id, kind, status, attempts FROM {}").format(
        sql.Identifier(schema, "jobs")))
    return {int(i): (str(k), str(s), int(a)) for i, k, s, a in rows}  # type: ignore[call-overload]


def dead(schema: str, queue: str, *args: str) -> tuple[int, str, str]:
    result = run_cli("jobq", "dead", *args, *pg_args(queue), env=schema_env(schema))
    return result.returncode, result.stdout, result.stderr


def consume(schema: str, queue: str, claim: str, directory: Path, *extra: str) -> None:
    result = run_cli("consumer", *pg_args(queue), "--claim", claim, "--once", "-p", RECORD,
                     "-a", f"directory={directory}", *extra, env=schema_env(schema))
    assert result.returncode == 0, result.stderr


def produce(schema: str, queue: str, count: int, kind: str) -> None:
    result = run_cli("producer", *pg_args(queue), "--count", str(count), "--kind", kind,
                     env=schema_env(schema))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("claim", ["lease", "transaction"])
def test_dead_jobs_are_listed_requeued_and_purged(
        claim: str, pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 4, "bad")
    produce(schema, queue_name, 1, "good")
    consume(schema, queue_name, claim, tmp_path / "first", "-a", "fail_kind=bad")
    a, b, c, d = sorted(i for i, (kind, _, _) in jobs(pg_dsn, schema).items() if kind == "bad")

    code, out, err = dead(schema, queue_name, "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [row["id"] for row in listed] == [a, b, c, d]
    assert all(row["last_error"] == "PermanentError: kind bad always fails" for row in listed)

    code, out, err = dead(schema, queue_name, "requeue", "--id", str(a))
    assert (code, out.strip()) == (0, f"requeued 1 dead jobs: {a}"), err
    assert jobs(pg_dsn, schema)[a] == ("bad", "pending", 0)  # attempts reset

    before = jobs(pg_dsn, schema)
    code, out, err = dead(schema, queue_name, "requeue", "--id", UNKNOWN)
    assert code == 1 and f"no dead job {UNKNOWN} in queue {queue_name!r}" in err
    code, out, err = dead(schema, queue_name, "purge", "--id", str(b), "--id", UNKNOWN)
    assert code == 1 and f"no dead job {UNKNOWN}" in err  # refused as a whole
    assert jobs(pg_dsn, schema) == before

    code, out, err = dead(schema, queue_name, "purge", "--id", str(b))
    assert (code, out.strip()) == (0, f"purged 1 dead jobs: {b}"), err
    assert b not in jobs(pg_dsn, schema)

    code, out, err = dead(schema, queue_name, "requeue", "--kind", "bad")
    assert (code, out.strip()) == (0, f"requeued 2 dead jobs: {c}, {d}"), err
    consume(schema, queue_name, claim, tmp_path / "again")
    assert sorted(map(int, completions(tmp_path / "again"))) == [a, c, d]
    assert {i: s for i, (_, s, _) in jobs(pg_dsn, schema).items()} == {
        a: "done", c: "done", d: "done", max(jobs(pg_dsn, schema)): "done"}


def test_requeue_all_and_purge_all(pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 3, "bad")
    consume(schema, queue_name, "transaction", tmp_path, "-a", "fail_kind=bad")
    code, out, err = dead(schema, queue_name, "requeue", "--all")
    assert code == 0 and out.startswith("requeued 3 dead jobs"), err
    assert {v for v in jobs(pg_dsn, schema).values()} == {("bad", "pending", 0)}
    consume(schema, queue_name, "lease", tmp_path, "-a", "fail_kind=bad")
    code, out, err = dead(schema, queue_name, "purge", "--all")
    assert code == 0 and out.startswith("purged 3 dead jobs"), err
    assert jobs(pg_dsn, schema) == {}
    code, out, err = dead(schema, queue_name, "purge")
    assert code == 2 and "say which dead jobs" in err
