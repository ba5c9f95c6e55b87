"""`jobq move` between the real servers, through the real CLIs, both ways.

A queue's waiting jobs (due and delayed) and its dead ones go from PostgreSQL to RabbitMQ
and back keeping their ids, attempts, remaining delay and last error; a move killed with
SIGKILL halfway and run again loses nothing (the batch in flight at most twice).
"""

from __future__ import annotations

import collections
import signal
from pathlib import Path
from typing import Any

from psycopg import sql

from tests.conftest import PG_DSN, fetch, jobs_table, wait_until
from tests.contract.backends import Backend
from tests.processors import completions


def rows(pg: Backend) -> dict[str, dict[str, Any]]:
    assert pg.schema is not None
    found = fetch(PG_DSN, sql.SQL(
        "SELECT id, kind, status, attempts, last_error, run_at > now() + interval '30 minutes' "
        "FROM {} WHERE queue = %s").format(jobs_table(pg.schema)), [pg.queue])
    return {str(r[0]): {"kind": r[1], "status": r[2], "attempts": r[3], "error": r[4],
                        "delayed": r[5]} for r in found}


def move(pg: Backend, *args: str) -> str:
    result = pg.run("jobq", "move", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_pending_and_dead_jobs_go_to_rabbitmq_and_back_as_they_were(
        both: tuple[Backend, Backend], tmp_path: Path) -> None:
    pg, rabbit = both
    pg.produce(3, "--kind", "doomed")
    assert pg.run("consumer", "--once", "-p", "fail").returncode == 0
    pg.produce(4, "--kind", "now")
    pg.produce(2, "--kind", "later", "--delay", "3600")
    before = rows(pg)
    dead = {i for i, r in before.items() if r["status"] == "dead"}
    assert len(dead) == 3 and all(before[i]["attempts"] >= 1 and before[i]["error"] for i in dead)

    said = move(pg, "--from", "postgres", "--to", "rabbitmq")
    assert "moved 6 pending jobs" in said, said
    said = move(pg, "--from", "postgres", "--to", "rabbitmq", "--state", "dead")
    assert "moved 3 dead jobs" in said, said
    assert rows(pg) == {}
    depth = rabbit.depth()
    assert (depth["ready"], depth["retry"], depth["dead"]) == (4, 2, 3), depth
    letters = {str(d["id"]): d for d in rabbit.dead()}
    assert set(letters) == dead
    assert all(letters[i]["attempts"] == before[i]["attempts"]
               and letters[i]["last_error"] == before[i]["error"]
               for i in dead), letters

    said = move(pg, "--from", "rabbitmq", "--to", "postgres")
    assert "moved 6 pending jobs" in said, said
    said = move(pg, "--from", "rabbitmq", "--to", "postgres", "--state", "dead", "--kind", "doomed")
    assert "moved 3 dead jobs" in said, said
    assert rows(pg) == before  # ids, kinds, states, attempts, errors and delays as they were
    depth = rabbit.depth()
    assert (depth["ready"], depth["retry"], depth["dead"]) == (0, 0, 0), depth

    done = pg.run("consumer", "--once", "-p", "tests.processors:record",
                  "-a", f"directory={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert sorted(completions(tmp_path)) == sorted(i for i, r in before.items()
                                                   if r["kind"] == "now")


def test_refusals_change_nothing(both: tuple[Backend, Backend]) -> None:
    pg, rabbit = both
    result = pg.run("jobq", "move", "--from", "postgres", "--to", "postgres")
    assert result.returncode == 2 and "--to: the other backend" in result.stderr
    result = pg.run("jobq", "move", "--from", "rabbitmq", "--to", "postgres", "--kind", "x")
    assert result.returncode == 2 and "--kind moves dead jobs only" in result.stderr
    consumer = rabbit.start("consumer", "-p", "noop")
    try:
        def refused() -> bool:  # once the consumer is up (before, there is nothing to move)
            result = pg.run("jobq", "move", "--from", "rabbitmq", "--to", "postgres")
            return result.returncode == 2 and "stop them before moving" in result.stderr
        assert wait_until(refused, 30, step=0.5)
    finally:
        consumer.send_signal(signal.SIGTERM)
        consumer.communicate(timeout=30)


def test_a_move_killed_halfway_and_run_again_loses_nothing(
        both: tuple[Backend, Backend], tmp_path: Path) -> None:
    pg, rabbit = both
    pg.produce(6_000, "--batch", "1000")
    ids = set(rows(pg))
    mover = pg.start("jobq", "move", "--from", "postgres", "--to", "rabbitmq", "--batch", "100")
    try:
        assert wait_until(lambda: rabbit.depth()["ready"] >= 1000, 60)
    finally:
        mover.send_signal(signal.SIGKILL)
        mover.communicate(timeout=10)
    assert 0 < len(rows(pg)) < len(ids)  # killed halfway
    move(pg, "--from", "postgres", "--to", "rabbitmq")
    assert rows(pg) == {}
    done = rabbit.run("consumer", "--once", "-n", "8", "-p", "tests.processors:record",
                      "-a", f"directory={tmp_path}", timeout=180)
    assert done.returncode == 0, done.stderr
    seen = collections.Counter(completions(tmp_path))
    assert set(seen) == ids  # lost 0
    assert sum(n - 1 for n in seen.values()) <= 100  # at most the batch in flight, twice
