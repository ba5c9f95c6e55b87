"""Handlers for tests that run the real consumer: each leaves evidence the test can check."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from pathlib import Path
from typing import Any, TextIO

import psycopg
from psycopg import sql

from jobq import Job, PermanentError, Retry


def appending(directory: str, suffix: str) -> TextIO:
    """This process's record file ``directory/<pid>.<suffix>``, line-buffered for appending."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    return (path / f"{os.getpid()}.{suffix}").open("a", buffering=1, encoding="utf-8")


def lines(directory: str | Path, suffix: str) -> list[str]:
    """Every line of every process's ``<pid>.<suffix>`` record under ``directory``."""
    return [line for file in Path(directory).glob(f"*.{suffix}")
            for line in file.read_text().splitlines()]


def record(directory: str, sleep_ms: float = 0.0, fail_kind: str = "", fail_rate: float = 0.0) -> Any:
    """Append each job id to ``directory/<pid>.log`` (an independent completion record).

    ``fail_rate``: that fraction of attempts fails with ``Retry(delay=0.2)`` before recording,
    so retries are exercised too (the chaos suite uses it). Never on a job's last attempt: these
    failures alone never kill a job, so in the fault suite none is meant to die.
    """
    out = appending(directory, "log")
    rand = random.Random()

    async def handle(job: Job) -> None:
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if fail_kind and job.kind == fail_kind:
            raise PermanentError(f"kind {job.kind} always fails")
        if fail_rate and not job.last_attempt and rand.random() < fail_rate:
            raise Retry(delay=0.2, reason=f"chaos: attempt {job.attempt} failed on purpose")
        out.write(f"{job.id}\n")

    return handle


def completions(dir: str | Path) -> list[str]:
    """Every job id recorded under ``dir``, one entry per completion."""
    return [line for line in lines(dir, "log") if line]


def fail_recording(directory: str) -> Any:
    """Record ``id attempt monotonic-time`` for each attempt, then fail (retryable)."""
    out = appending(directory, "attempts")

    async def handle(job: Job) -> None:
        out.write(f"{job.id} {job.attempt} {time.time():.3f}\n")
        raise ValueError(f"attempt {job.attempt} failed")

    return handle


def fail_loudly(size: int = 300_000) -> Any:
    """Fail every attempt with an error message of ``size`` characters (retryable)."""

    async def handle(job: Job) -> None:
        raise ValueError("x" * size)

    return handle


def effect(table: str, fail_kind: str = "", sleep_ms: float = 0.0) -> Any:
    """Insert ``(job id, attempt)`` into ``table`` through ``job.context``, then fail on ``fail_kind``.

    Transaction mode only: the row is written in the job's own transaction, so it must commit
    with the job's success and vanish with its failure or its consumer's death. The sleep comes
    after the write, so a consumer killed mid-job dies holding an uncommitted effect.
    """
    schema, _, name = table.rpartition(".")
    insert = sql.SQL("INSERT INTO {} (job_id, attempt) VALUES (%s, %s)").format(
        sql.Identifier(schema, name) if schema else sql.Identifier(name))

    async def handle(job: Job) -> None:
        if job.context is None:
            raise PermanentError("effect needs job.context (postgres.claim: transaction)")
        await job.context.execute(insert, (int(job.id), job.attempt))
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if fail_kind and job.kind == fail_kind:
            raise ValueError(f"kind {job.kind} fails after writing its effect")

    return handle


async def deallocate(job: Job) -> None:
    """Drop every prepared statement of the job's connection, as a pooler's reset would."""
    await job.context.execute("DEALLOCATE ALL")


def end_transaction(table: str, how: str, fail: str = "") -> Any:
    """Write an effect through ``job.context``, then end the job's transaction as a careless
    handler (or an ORM) would: ``how`` is ``commit`` or ``rollback`` (the connection's methods)
    or ``execute`` (a COMMIT statement); with ``fail``, raise afterwards."""
    schema, _, name = table.rpartition(".")
    insert = sql.SQL("INSERT INTO {} (job_id, attempt) VALUES (%s, %s)").format(
        sql.Identifier(schema, name))

    async def handle(job: Job) -> None:
        await job.context.execute(insert, (int(job.id), job.attempt))
        if how == "execute":
            await job.context.execute("COMMIT")
        else:
            await getattr(job.context, how)()
        if fail:
            raise ValueError(f"failed after {how} of the job's transaction")

    return handle


def fail_at_commit(how: str, table: str = "") -> Any:
    """Return normally from a job whose COMMIT then fails: ``how`` is ``deferred`` (a row that
    breaks a DEFERRABLE INITIALLY DEFERRED foreign key of ``table``) or ``idle`` (the server
    ends the session: idle_in_transaction_session_timeout) or ``swallowed`` (a statement
    fails and the handler swallows its error, leaving the transaction aborted)."""
    schema, _, name = table.rpartition(".")
    insert = sql.SQL("INSERT INTO {} (parent) VALUES (%s)").format(sql.Identifier(schema, name))

    async def handle(job: Job) -> None:
        if how == "deferred":
            await job.context.execute(insert, (-int(job.id) % 1000,))
        elif how == "swallowed":
            with contextlib.suppress(psycopg.Error):
                await job.context.execute("SELECT 1 / 0")
        else:
            await job.context.execute("SET LOCAL idle_in_transaction_session_timeout = 100")
            await asyncio.sleep(0.5)

    return handle


def poison(directory: str, kind: str = "poison", min_ms: float = 0.0, max_ms: float = 0.0) -> Any:
    """Kill the process (as a segfault would) on a job of ``kind``; record the others (``record``)
    after sleeping ``min_ms``-``max_ms``.

    The poison job writes ``<id> <attempt>`` to ``directory/poison.runs`` before it dies, so a
    test can count its own runs; the others append their id to ``directory/<pid>.log``.
    """
    path = Path(directory)
    innocent = record(directory)
    rand = random.Random()

    async def handle(job: Job) -> None:
        if job.kind == kind:
            with (path / "poison.runs").open("a", encoding="utf-8") as runs:
                runs.write(f"{job.id} {job.attempt}\n")
            os._exit(137)
        if max_ms:
            await asyncio.sleep(rand.uniform(min_ms, max_ms) / 1000)
        await innocent(job)

    return handle


def bad_first(mode: str, directory: str) -> Any:
    """Fail the job with payload ``n == 0`` the way ``mode`` says; record the others' ids.

    Modes (issue 19, item 1): ``surrogate`` (a reason with a lone surrogate), ``cancelled``
    (the handler's own CancelledError), ``bad_retry`` (``Retry(delay="soon")``, wrong-typed).
    """
    out = appending(directory, "log")

    async def handle(job: Job) -> None:
        if job.payload.get("n") == 0:
            if mode == "surrogate":
                raise FileNotFoundError(os.fsdecode(b"/in/\xff.csv"))
            if mode == "cancelled":
                raise asyncio.CancelledError()
            raise Retry(delay="soon")  # type: ignore[arg-type]  # the user's bug, on purpose
        out.write(f"{job.id}\n")

    return handle


def sync_overrun(directory: str, sleep_s: float = 0.5) -> Any:
    """A plain ``def``: its first attempt sleeps ``sleep_s``; each run writes start/end lines."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / "runs.log").open("a", buffering=1, encoding="utf-8")

    def handle(job: Job) -> None:
        out.write(f"start {job.id} {job.attempt} {time.monotonic():.6f}\n")
        if job.attempt == 1:
            time.sleep(sleep_s)
        out.write(f"end {job.id} {job.attempt} {time.monotonic():.6f}\n")

    return handle


def sync_barrier(parties: int, directory: str) -> Any:
    """A plain ``def`` that returns only once ``parties`` runs are inside it at the same time."""
    import threading

    barrier = threading.Barrier(parties, timeout=5)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = (path / "threads.log").open("a", buffering=1, encoding="utf-8")

    def handle(job: Job) -> None:
        out.write(f"{threading.current_thread().name}\n")
        barrier.wait()

    return handle


async def follow_up(job: Job) -> None:
    """Transaction mode: a ``parent`` (or ``doomed``) enqueues a ``child`` through job.context;
    ``doomed`` then fails. A ``child`` does nothing (it only has to exist, or not)."""
    if job.kind not in ("parent", "doomed"):
        return
    from jobq.core.port import NewJob

    await job.context.enqueue(NewJob(kind="child", payload={"of": job.id}))
    if job.kind == "doomed":
        raise PermanentError("the parent fails after enqueueing its child")


def due_record(directory: str) -> Any:
    """Record ``id attempt time`` for each run; a job whose payload has ``retry`` fails its first
    attempt with ``Retry(delay=payload["retry"])`` (delayed retries are timed too), and one
    with ``sleep`` sleeps that many seconds first."""
    out = appending(directory, "due")

    async def handle(job: Job) -> None:
        if "sleep" in job.payload:
            await asyncio.sleep(float(job.payload["sleep"]))
        out.write(f"{job.id} {job.attempt} {time.time():.6f}\n")
        if "retry" in job.payload and job.attempt == 1:
            raise Retry(delay=float(job.payload["retry"]), reason="timed retry")

    return handle


def due_runs(directory: str | Path) -> list[tuple[str, int, float]]:
    """Every run ``due_record`` recorded under ``directory``: (id, attempt, epoch time)."""
    return [(job_id, int(attempt), float(at))
            for job_id, attempt, at in (line.split() for line in lines(directory, "due"))]


def tick_record(directory: str) -> Any:
    """Record ``schedule tick id`` for each job a schedule enqueued (its headers say which)."""
    out = appending(directory, "ticks")

    async def handle(job: Job) -> None:
        out.write(f"{job.headers.get('schedule')} {job.headers.get('tick')} {job.id}\n")

    return handle


def ticks(directory: str | Path) -> list[tuple[str, str, str]]:
    """Every (schedule, tick, job id) ``tick_record`` recorded under ``directory``."""
    return [(schedule, tick, job_id)
            for schedule, tick, job_id in (line.split() for line in lines(directory, "ticks"))]


def timed(directory: str, sleep_ms: float = 0.0, gate: str = "") -> Any:
    """Write ``start <id> <epoch>`` and ``end <id> <epoch>`` around a sleep of ``sleep_ms``, to
    ``directory/<pid>.runs``: when each job ran, to compare with when a queue was paused. With
    ``gate`` (a path), a job ends only once that file exists: the test decides when."""
    out = appending(directory, "runs")
    opened = Path(gate) if gate else None

    async def handle(job: Job) -> None:
        out.write(f"start {job.id} {time.time():.3f}\n")
        await asyncio.sleep(sleep_ms / 1000)
        # A file another process makes: no asyncio.Event can see it, so it is looked for.
        while opened is not None and not opened.exists():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        out.write(f"end {job.id} {time.time():.3f}\n")

    return handle


def runs(directory: str | Path) -> list[tuple[str, str, float]]:
    """Every ``(event, job id, epoch)`` line ``timed`` wrote under ``directory``."""
    whole = (parts for parts in (line.split() for line in lines(directory, "runs"))
             if len(parts) == 3)  # a line being written is skipped until it is whole
    return [(event, job_id, float(at)) for event, job_id, at in whole]


def kinds(directory: str) -> Any:
    """Append each job's kind to ``directory/<pid>.log``, in the order the jobs ran."""
    out = appending(directory, "log")

    async def handle(job: Job) -> None:
        out.write(f"{job.kind}\n")

    return handle


def held(directory: str, gate: str) -> Any:
    """Write ``start <queue> <id>`` to ``directory/<pid>.held``, wait until the file ``gate``
    exists (the test decides when), then write ``end <queue> <id>``: how many ran at once."""
    out = appending(directory, "held")
    opened = Path(gate)

    async def handle(job: Job) -> None:
        out.write(f"start {job.queue} {job.id}\n")
        # A file another process makes: no asyncio.Event can see it, so it is looked for.
        while not opened.exists():  # noqa: ASYNC110, ASYNC240 - a stat, polled
            await asyncio.sleep(0.02)
        out.write(f"end {job.queue} {job.id}\n")

    return handle


def loop_blocker(directory: str, block_s: float = 5.0, sleep_ms: float = 100.0) -> Any:
    """An ``async def`` handler: a job of kind ``block`` blocks the event loop with
    ``time.sleep`` (the mistake the watchdog names); others await ``sleep_ms``. Each start and
    end is recorded as ``start|end <id> <kind> <epoch>`` in ``directory/<pid>.runs``."""
    out = appending(directory, "runs")

    async def handle(job: Job) -> None:
        out.write(f"start {job.id} {job.kind} {time.time()}\n")
        if job.kind == "block":
            time.sleep(block_s)  # noqa: ASYNC251 - blocking on purpose
        else:
            await asyncio.sleep(sleep_ms / 1000)
        out.write(f"end {job.id} {job.kind} {time.time()}\n")

    return handle


def redelivery_record(directory: str) -> Any:
    """Record ``<id> <attempt> <redelivered 0|1>`` per run in ``directory/<pid>.redelivered``;
    a redelivered job's first attempt then fails (retried at once), so its next run shows
    whether the flag outlives a clean retry."""
    out = appending(directory, "redelivered")

    async def handle(job: Job) -> None:
        out.write(f"{job.id} {job.attempt} {int(job.redelivered)}\n")
        if job.redelivered and job.attempt == 1:
            raise Retry(delay=0, reason="redelivered: once more, to see the flag kept")

    return handle
