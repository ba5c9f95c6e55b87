"""The steady-load fault scenarios (faults/steady.py): what each injects, and when.

A scenario is a fault window of ``window`` seconds that starts after the clean phase, and the
events in it: (seconds into the window, what to do to the run). Each event is injected into a
running `faults.steady.SteadyRun` (the producer going on at its offered rate).

- ``kills``: SIGKILL one of the two consumers (never the witness) every 20 s, three times in a
  row, a new one started at once as a supervisor would.
- ``terminate`` (PostgreSQL): pg_terminate_backend of every connection of the consumers twice a
  second for 20 s.
- ``saturate`` (PostgreSQL): every connection slot of the server taken (``max_connections``,
  the superuser's reserve too) for 10 s, after cutting the consumers' connections once, so
  that each must connect again into a full server ("sorry, too many clients already").
- ``block``: three handlers, 20 s apart, block the event loop of their consumer for 15 s, more
  than a lease (12 s) and past the AMQP heartbeat's patience (faults/work.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from faults.steady import SteadyRun

Event = tuple[float, Callable[["SteadyRun"], None]]
TRANSPORTS = ("postgres-lease", "postgres-transaction", "rabbitmq-quorum")
BLOCK_EVERY = 20.0
BLOCKS = 3


@dataclass(frozen=True)
class Scenario:
    """A fault window and its events; ``transports`` it applies to."""

    name: str
    window: float
    events: tuple[Event, ...] = ()
    transports: tuple[str, ...] = TRANSPORTS
    blocks: tuple[float, ...] = field(default=())  # s into the window a handler blocks the loop


def kill(run: SteadyRun) -> None:
    """kill -9 the consumer that is not the witness; start its replacement at once."""
    run.kill_one()


def cut(run: SteadyRun) -> None:
    """pg_terminate_backend of every connection of the consumers."""
    run.cut()


def saturate(run: SteadyRun) -> None:
    """Take every free connection slot of the server; through one of them cut the consumers'
    connections, and take the slots they freed before they connect again."""
    run.held.extend(fill(run.backend_dsn()))
    if not run.held:
        run.summary.problems.append("saturate: no connection slot was taken")
        return
    run.cut(through=run.held[-1])
    top_up(run)


def top_up(run: SteadyRun) -> None:
    """Take the slots freed since (a consumer's connection that ended)."""
    run.held.extend(fill(run.backend_dsn()))


def release(run: SteadyRun) -> None:
    """Give the connection slots back."""
    run.release()


def fill(dsn: str, at_most: int = 1000) -> list[psycopg.Connection[tuple[object, ...]]]:
    """Open connections until the server refuses one (too many clients); return them."""
    held: list[psycopg.Connection[tuple[object, ...]]] = []
    while len(held) < at_most:
        try:
            held.append(psycopg.connect(dsn, autocommit=True, connect_timeout=3,
                                        application_name="jobq-steady-filler"))
        except psycopg.OperationalError:
            break
    return held


SCENARIOS = {
    "kills": Scenario("kills", window=3 * 20.0, events=((0.0, kill), (20.0, kill), (40.0, kill))),
    "terminate": Scenario("terminate", window=20.0,
                          events=tuple((i * 0.5, cut) for i in range(40)),
                          transports=TRANSPORTS[:2]),
    "saturate": Scenario("saturate", window=10.0,
                         events=((0.0, saturate), *((i * 0.25, top_up) for i in range(1, 40)),
                                 (10.0, release)),
                         transports=TRANSPORTS[:2]),
    "block": Scenario("block", window=BLOCKS * BLOCK_EVERY,
                      blocks=tuple(i * BLOCK_EVERY for i in range(BLOCKS))),
}
