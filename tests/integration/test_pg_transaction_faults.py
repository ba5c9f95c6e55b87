"""Transaction mode with a job that kills its consumer: it ends dead alone, explained."""

from __future__ import annotations

import time
from pathlib import Path

from psycopg import sql

from jobq.transports.postgres.claims import GRACE
from tests.conftest import fetch, pg_args, run_cli, schema_env
from tests.integration.test_pg_transaction import TXN, table
from tests.integration.test_postgres import produce, status_counts
from tests.processors import completions


def test_a_job_that_kills_its_consumer_ends_dead_alone_its_batch_mates_done(
        pg_dsn: str, schema: str, queue_name: str, tmp_path: Path) -> None:
    produce(schema, queue_name, 10, "--max-attempts", "3")
    produce(schema, queue_name, 1, "--kind", "poison", "--max-attempts", "3")
    produce(schema, queue_name, 10, "--max-attempts", "3")
    exits = []
    for _ in range(8):
        result = run_cli("consumer", *pg_args(queue_name), *TXN, "--once", "-n", "1",
                         "-p", "tests.processors:poison", "-a", f"directory={tmp_path}",
                         env=schema_env(schema), timeout=60)
        exits.append(result.returncode)
        if result.returncode == 0 and "pending" not in status_counts(pg_dsn, schema, queue_name):
            break
        time.sleep(GRACE)  # a job picked by a process that died is passed over for that long
    assert exits.count(137) == 3, exits  # one death per attempt of the poison job, no more
    rows = fetch(pg_dsn, sql.SQL("SELECT kind, status, attempts, last_error FROM {}")
                 .format(table(schema)))
    [(_, status, attempts, error)] = [r for r in rows if r[0] == "poison"]
    assert (status, attempts) == ("dead", 3)
    assert "the consumer died or lost its connection during each of its 3 attempts" in str(error)
    innocent = [r for r in rows if r[0] != "poison"]
    assert len(innocent) == 20
    assert all(r[1:3] == ("done", 1) for r in innocent), innocent  # one run each, no attempt spent
    assert len(completions(tmp_path)) == 20
