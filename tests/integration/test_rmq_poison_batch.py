"""A job that kills its consumer harms only itself, on quorum and classic queues (issue 19, 2-3).

The poison batch: 20 innocent jobs and one whose handler kills the process, one worker and a
prefetch of 11, ``consumer --once`` run again after each crash. Before: on quorum all 21 (or
the 11 in flight at each crash) ended dead, the innocent ones charged for the poison's crashes;
on classic the poison job looped forever (attempt = header + redelivered never grew).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.backends import Backend, backend_under_test
from tests.contract.story import events
from tests.contract.test_contract import by_event, consumer_args

MAX_RUNS = 8  # one or two unattributed crashes + 3 runs alone + the run that buries it


@pytest.fixture(params=["quorum", "classic"])
def rabbit(amqp_url: str, queue_name: str, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh queue of each type (``jobq init`` declares it)."""
    with backend_under_test(request, queue_name, f"rabbitmq-{request.param}") as backend:
        yield backend


def test_a_poison_job_dies_alone_and_its_batch_mates_end_done(rabbit: Backend, tmp_path: Path) -> None:
    queue_type = rabbit.env["JOBQ_RABBITMQ__QUEUE_TYPE"]
    rabbit.set(CONSUMER__BUFFER="10")
    rabbit.produce(10, "--kind", "slow", "--max-attempts", "3")
    rabbit.produce(1, "--kind", "crash", "--max-attempts", "3")
    rabbit.produce(10, "--kind", "slow", "--max-attempts", "3")
    story = consumer_args(tmp_path, "-a", "slow_ms=100", "--concurrency", "1", "--max-attempts", "3")

    codes, logs = [], []
    for _ in range(MAX_RUNS):
        result = rabbit.run("consumer", "--once", *story)
        codes.append(result.returncode)
        logs.append(result.stderr)
        if result.returncode != 137:
            break
    assert codes[-1] == 0, (codes, result.stderr[-3000:])

    rows = events(tmp_path)
    starts = collections.defaultdict(list)
    for row in by_event(rows, "start"):
        starts[row["kind"], row["id"]].append(row["attempt"])
    (poison,) = [attempts for (kind, _), attempts in starts.items() if kind == "crash"]
    innocent = {job_id for kind, job_id in starts if kind == "slow"}
    oks = [row["id"] for row in by_event(rows, "ok")]
    done = set(oks)
    dead = rabbit.dead()
    print(f"{queue_type}: runs {codes}; poison started at attempts {poison}; "
          f"{len(innocent & done)} innocent done ({len(oks) - len(done)} twice), {len(dead)} dead")
    # The first crash cannot be told from its batch-mates' and is refunded; then 3 runs alone.
    # On classic one more: a first redelivery there runs again with the others (a classic
    # queue marks its whole backlog redelivered after a crash of its broker).
    unattributed = [1, 1] if queue_type == "classic" else [1]
    assert poison == [*unattributed, 1, 2, 3], (dead, logs)
    assert codes == [137] * (len(unattributed) + 3) + [0]
    (buried,) = dead
    assert buried["kind"] == "crash" and buried["attempts"] == 3
    assert "killed or stalled its consumer while running alone on attempt 3 of 3" in buried["last_error"]
    assert len(innocent) == 20 and innocent <= done
    charged = {job_id: a for (kind, job_id), a in starts.items() if kind == "slow" and set(a) != {1}}
    assert not charged, (charged, logs)  # none spent an attempt
    assert rabbit.waiting() == 0
