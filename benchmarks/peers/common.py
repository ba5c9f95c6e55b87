"""What every peer's command line shares: the flags, the numbered jobs, the paced producer."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import conninfo, sql

from benchmarks.processors import Recorder

BATCH = 1_000  # jobs per enqueue call when pre-enqueueing
GATE_POLL = 0.002  # seconds between looks for the start gate's file


class ThreadedJob:
    """The job body of a peer whose worker runs jobs in threads (dramatiq, Celery).

    The first job waits for the start gate, every job sleeps ``--sleep-ms`` and is recorded
    into a file of its thread's own (no lock per job); ``last`` is when the latest one ended
    (monotonic; 0.0 before the first), what ``--once`` watches.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._local = threading.local()
        self._opened = threading.Event()
        self._seconds = args.sleep_ms / 1000
        self.last = 0.0

    def run(self, job: dict[str, Any]) -> None:
        """Run and record one job."""
        if not self._opened.is_set():
            while self._args.gate and not os.path.exists(self._args.gate):
                time.sleep(GATE_POLL)
            self._opened.set()
        if self._seconds:
            time.sleep(self._seconds)
        rec = getattr(self._local, "rec", None)
        if rec is None:
            rec = self._local.rec = Recorder(self._args.dir)
        rec.job(job)
        self.last = time.monotonic()


def parser(doc: str | None) -> argparse.ArgumentParser:
    """``produce``, ``consume``, ``install`` and ``drop``, with the harness's flags."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("command", choices=("install", "drop", "produce", "consume"))
    p.add_argument("--dsn", default="", help="PostgreSQL peers")
    p.add_argument("--schema", default="", help="PostgreSQL peers: the schema of this case")
    p.add_argument("--url", default="", help="RabbitMQ peers")
    p.add_argument("--queue", default="bench")
    p.add_argument("--dir", default="", help="where the completion record goes")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="work per job")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--gate", default="", help="no job completes before this file exists")
    p.add_argument("--once", action="store_true", help="exit once the queue is empty")
    p.add_argument("--count", type=int, default=0, help="produce: jobs to enqueue")
    p.add_argument("--rate", type=float, default=0.0, help="produce: jobs/s, stamped (0: all now)")
    return p


def payloads(start: int, stop: int, stamp: bool) -> list[bytes]:
    """The JSON bodies of jobs ``start..stop-1``, with ``sent_at`` when stamped."""
    now = time.time()
    return [json.dumps({"n": n, "sent_at": now} if stamp else {"n": n}).encode()
            for n in range(start, stop)]


async def produce(count: int, rate: float,
                  send: Callable[[Sequence[bytes]], Awaitable[object]]) -> None:
    """Enqueue ``count`` jobs through ``send``: in batches at once, or open-loop at ``rate``
    (every millisecond, the jobs due by then, stamped with the time they are sent)."""
    if not rate:
        for start in range(0, count, BATCH):
            await send(payloads(start, min(count, start + BATCH), stamp=False))
        return
    began, sent = time.monotonic(), 0
    while sent < count:
        due = min(count, int((time.monotonic() - began) * rate) + 1)
        if due > sent:
            await send(payloads(sent, due, stamp=True))
            sent = due
        else:
            await asyncio.sleep(0.001)


def schema_dsn(args: argparse.Namespace) -> str:
    """The server's DSN with ``search_path`` set to the case's schema (PostgreSQL peers)."""
    return conninfo.make_conninfo(args.dsn, options=f"-c search_path={args.schema}")


async def create_schema(args: argparse.Namespace) -> None:
    """The case's schema, for a PostgreSQL peer to install itself into."""
    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(args.schema)))


async def drop_schema(args: argparse.Namespace) -> None:
    """The case's schema dropped, with everything the peer put in it."""
    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(args.schema)))


def main(doc: str | None, commands: Mapping[str, Callable[[argparse.Namespace], Any]]) -> None:
    """Parse the command line and run its command (a coroutine function on its own loop)."""
    args = parser(doc).parse_args()
    done = commands[args.command](args)
    if inspect.iscoroutine(done):
        asyncio.run(done)
