"""A real consumer on the real PostgreSQL, watched through /metrics, /readyz, its logs and
`jobq stats`: the counters move with processed, retried and dead jobs, and the depth it
reports is what the server holds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from psycopg import sql

from tests.conftest import fetch, pg_args, run_cli, schema_env, start_cli
from tests.scrape import Running, get, scrape, value, wait_for

pytestmark = pytest.mark.integration


def consumer(schema: str, queue: str, **env: str) -> Running:
    """A consumer with metrics on a free port, the scripted handler and JSON logs."""
    extra = {"JOBQ_METRICS__DEPTH_INTERVAL": "0.2", "JOBQ_LOG__SUMMARY_INTERVAL": "0.5", **env}
    running = Running(start_cli("consumer", *pg_args(queue), "--metrics-port", "0",
                                "--processor", "tests.scripted:by_kind", "--log-format", "json",
                                "--shutdown-timeout", "0.5",
                                env=schema_env(schema, **extra)))
    wait_for(lambda: get(f"{running.base}/readyz")[0] == 200, 15, "/readyz")
    return running


def produce(schema: str, queue: str, kind: str, count: int, *extra: str) -> None:
    done = run_cli("producer", *pg_args(queue), "--kind", kind, "--count", str(count), *extra,
                   env=schema_env(schema))
    assert done.returncode == 0, done.stderr


def server_depth(dsn: str, schema: str, queue: str) -> dict[str, int]:
    """Counts by status straight from the table, independent of jobq's own query."""
    rows = fetch(dsn, sql.SQL("SELECT status, count(*) FROM {} WHERE queue = %s GROUP BY status")
                 .format(sql.Identifier(schema, "jobs")), (queue,))
    return {str(status): int(n) for status, n in rows}  # type: ignore[call-overload]


def stats_json(schema: str, queue: str) -> dict[str, Any]:
    done = run_cli("jobq", "stats", *pg_args(queue), "--json", env=schema_env(schema))
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_counters_depth_and_logs_follow_the_jobs(pg_dsn: str, schema: str, queue_name: str) -> None:
    running = consumer(schema, queue_name)
    try:
        labels = {"transport": "postgres", "queue": queue_name}
        produce(schema, queue_name, "ok", 20)
        produce(schema, queue_name, "flaky", 5)
        produce(schema, queue_name, "bad", 3)

        def settled() -> bool:
            m = scrape(running.base)
            return [value(m, "jobq_jobs_total", outcome=o, **labels)
                    for o in ("ok", "retried", "dead")] == [25, 5, 3]

        wait_for(settled, 20, "25 ok, 5 retried, 3 dead")
        m = scrape(running.base)
        assert value(m, "jobq_job_errors_total", error="Retry", **labels) == 5
        assert value(m, "jobq_job_errors_total", error="PermanentError", **labels) == 3
        assert value(m, "jobq_job_duration_seconds_count", **labels) == 33
        assert value(m, "jobq_job_latency_seconds_count", **labels) == 25
        assert value(m, "jobq_redeliveries_total", **labels) == 5
        assert value(m, "jobq_ready", **labels) == 1

        # Depth: what the gauge says, what `jobq stats` says and what the table holds agree.
        produce(schema, queue_name, "ok", 7, "--delay", "600")  # pending, not due for 10 min
        produce(schema, queue_name, "hold", 1)  # running until the consumer stops
        truth = {"pending": 7, "running": 1, "dead": 3}
        wait_for(lambda: {s: value(scrape(running.base), "jobq_queue_depth", state=s, **labels)
                          for s in truth} == truth, 10, f"depth gauges {truth}")
        assert {s: n for s, n in server_depth(pg_dsn, schema, queue_name).items()
                if s != "done"} == truth
        assert value(scrape(running.base), "jobq_in_flight", **labels) == 1
        stats = stats_json(schema, queue_name)
        assert stats["depth"] == truth and stats["transport"] == "postgres"
        # Only delayed jobs wait: none is due, so nothing waits yet (before, the gauge gave the
        # delayed jobs' age, and a latency alert fired on a healthy queue).
        oldest = value(scrape(running.base), "jobq_queue_oldest_pending_seconds", **labels)
        assert oldest == 0 and stats["oldest_pending_seconds"] is None, (oldest, stats)
        table = run_cli("jobq", "stats", *pg_args(queue_name), env=schema_env(schema)).stdout
        assert any(line.split() == ["pending", "7"] for line in table.splitlines())
        wait_for(lambda: any('"event": "summary"' in line and '"pending": 7' in line
                             for line in running.lines), 5, "a summary line with the depth")
    finally:
        code = running.stop()
    assert code == 0, "".join(running.lines)
    logs = [json.loads(line) for line in running.lines if line.startswith("{")]
    failures = [(line["level"], line["outcome"]) for line in logs
                if line["level"] in ("warning", "error") and "job_id" in line]
    # 5 flaky first attempts, and the held job interrupted at the shutdown deadline: warnings;
    # the 3 dead: errors.
    assert sorted(failures) == [("error", "dead")] * 3 + [("warning", "retried")] * 6
    assert all(line["queue"] == queue_name and line["transport"] == "postgres" for line in logs)
    summary = [line for line in logs if line.get("event") == "summary"]
    assert summary and all(line["level"] == "info" and "rate" in line for line in summary)
    (stopped,) = [line["msg"] for line in logs if line["msg"].startswith("stopped:")]
    assert "ok=25 retried=6 dead=3" in stopped
    assert float(stopped.split("shutdown_seconds=")[1].split()[0]) >= 0


def test_rescued_leases_and_reconnects(pg_dsn: str, schema: str, queue_name: str) -> None:
    running = consumer(schema, queue_name, JOBQ_POSTGRES__RESCUE_INTERVAL="0.2")
    labels = {"transport": "postgres", "queue": queue_name}
    try:
        # A job whose consumer died mid-run: running, lease long expired.
        fetch(pg_dsn, sql.SQL(
            "INSERT INTO {} (queue, kind, payload, status, attempts, locked_until, locked_by) "
            "VALUES (%s, 'ok', '{{}}', 'running', 1, now() - interval '1 minute', 'gone:1') "
            "RETURNING id").format(sql.Identifier(schema, "jobs")), (queue_name,))
        wait_for(lambda: value(scrape(running.base), "jobq_rescued_leases_total", **labels) == 1,
                 10, "the expired lease to be rescued")
        wait_for(lambda: value(scrape(running.base), "jobq_jobs_total", outcome="ok",
                               **labels) == 1, 10, "the rescued job to run")

        # Cut every connection this consumer holds (they are the only ones naming our schema).
        killed = fetch(pg_dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE pid <> pg_backend_pid() AND query LIKE %s", (f"%{schema}%",))
        assert killed, "found none of the consumer's connections"
        produce(schema, queue_name, "ok", 3)
        wait_for(lambda: value(scrape(running.base), "jobq_jobs_total", outcome="ok",
                               **labels) == 4, 20, "jobs after the connections were cut")
        wait_for(lambda: (value(scrape(running.base), "jobq_reconnects_total", **labels) or 0)
                 >= 1, 20, "a counted reconnect")
        wait_for(lambda: get(f"{running.base}/readyz")[0] == 200, 10, "ready again")
        assert get(f"{running.base}/healthz")[0] == 200
    finally:
        code = running.stop()
    assert code == 0, "".join(running.lines)


def test_oldest_pending_is_the_longest_wait_of_a_due_job(schema: str, queue_name: str) -> None:
    init = run_cli("jobq", "init", *pg_args(queue_name), env=schema_env(schema))
    assert init.returncode == 0, init.stderr
    produce(schema, queue_name, "ok", 3, "--delay", "600")
    assert stats_json(schema, queue_name)["oldest_pending_seconds"] is None
    produce(schema, queue_name, "ok", 1)  # due now, and no consumer takes it
    wait_for(lambda: (stats_json(schema, queue_name)["oldest_pending_seconds"] or 0) >= 0.5, 10,
             "the due job's wait to show")
    assert stats_json(schema, queue_name)["oldest_pending_seconds"] < 60
