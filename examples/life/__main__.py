"""`make demo`: a job's life on both backends, then a quick side-by-side figure.

For PostgreSQL, then RabbitMQ, on a fresh queue of the local servers: enqueue four jobs of
examples/life/life_tasks.py through the Python API, run `jobq consume` on them, and watch:
one works, one fails once and is retried (its traceback in the consumer's log), one fails on
both its attempts and is dead, one waits for its delay. Then, from the command line, what an
operator would do: list the dead, show the job with its errors, "deploy the fix", retry it.
Last, 5,000 no-op jobs drained by each backend, jobs per second side by side; the real
benchmark is `python -m benchmarks`.

    python -m examples.life              # both backends
    python -m examples.life postgres     # one
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from jobq.api import connect_publisher
from jobq.config import load_settings

from .life_tasks import Customer, app, charge, remind, sync_crm, welcome

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXPECTED = {"welcome Ada", "sync_crm Ada", "remind Ada"}
WAIT = 30.0  # s for what the demo waits for; a server that is that slow is named


class Life:
    """One backend's demo: a queue, the consumer, the command lines an operator types."""

    def __init__(self, transport: str, work: Path) -> None:
        self.transport, self.work = transport, work
        self.config = str(ROOT / "configs" / f"{transport}.yaml")
        self.queue = f"life-{uuid.uuid4().hex[:6]}"
        self.env = {**os.environ, "JOBQ_LIFE_DIR": str(work),
                    "PYTHONPATH": os.pathsep.join((str(ROOT), os.environ.get("PYTHONPATH", "")))}
        self.consumer: subprocess.Popen[str] | None = None

    def jobq(self, *args: str, show: bool = True) -> str:
        """Run ``jobq <args>`` on the queue, printed as typed; its output."""
        line = ["jobq", *args, "-c", f"configs/{self.transport}.yaml", "-q", self.queue]
        if show:
            print(f"  $ {' '.join(line)}")
        done = subprocess.run([str(BIN / "jobq"), *args, "-c", self.config, "-q", self.queue],
                              env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"jobq {' '.join(args)} exited {done.returncode}: {done.stderr}")
        if show:
            print("\n".join(f"    {text}" for text in done.stdout.rstrip().splitlines()))
        return done.stdout

    async def enqueue(self) -> dict[str, str]:
        """The four jobs, through the Python API: their ids by task."""
        settings = load_settings(self.config, {"queue": self.queue, "log.level": "warning"})
        ada = Customer("Ada")
        async with connect_publisher(settings) as publisher:
            with app.using(publisher):
                return {"welcome": await welcome.enqueue(ada),
                        "sync_crm": await sync_crm.enqueue(ada),
                        "charge": await charge.enqueue(ada),
                        "remind": await remind.enqueue(ada, delay=2.0)}

    def start_consumer(self) -> None:
        """`jobq consume` on the queue with the demo's app; its log printed as it comes."""
        self.consumer = subprocess.Popen(
            [str(BIN / "jobq"), "consume", "-c", self.config, "-q", self.queue,
             "-A", "examples.life.life_tasks:app", "--shutdown-timeout", "5"],
            env=self.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self) -> None:
        assert self.consumer is not None and self.consumer.stderr is not None
        for line in self.consumer.stderr:
            print(f"    consumer | {line.rstrip()}", flush=True)

    def stop_consumer(self) -> None:
        """SIGTERM, as a supervisor would; it ends with its stop summary."""
        if self.consumer is not None and self.consumer.poll() is None:
            self.consumer.terminate()
            self.consumer.wait(timeout=60)

    def done(self) -> set[str]:
        """What the tasks say they finished."""
        log = self.work / "done.log"
        return set(log.read_text().splitlines()) if log.exists() else set()

    def dead(self) -> list[dict[str, object]]:
        """The queue's dead jobs, as `jobq dead list --json` gives them."""
        return list(json.loads(self.jobq("dead", "list", "--json", show=False)))

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        """Until ``ready()`` is true, or say what did not happen in WAIT seconds."""
        deadline = time.monotonic() + WAIT
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.transport}: {what} did not happen within {WAIT:g}s")
            time.sleep(0.1)

    def cleanup(self) -> None:
        """The demo's queue goes: its rows, or its RabbitMQ topology (or a line says why not)."""
        try:
            asyncio.run(asyncio.wait_for(forget(self.transport, self.config, self.queue), 30))
        except Exception as exc:  # never hides what the demo itself said
            print(f"demo: could not remove queue {self.queue}: {exc!r}", file=sys.stderr)


async def forget(transport: str, config: str, queue: str) -> None:
    """Delete what the demo left on the server for ``queue``."""
    settings = load_settings(config, {"queue": queue})
    if transport == "postgres":
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True,
                                                         connect_timeout=5) as conn:
            await conn.execute(sql.SQL("DELETE FROM {} WHERE queue = %s").format(
                sql.Identifier(settings.postgres.schema, "jobs")), (queue,))
        return
    import aio_pika

    tiers = [f"{queue}.retry.{t:g}" for t in settings.rabbitmq.retry_tiers]
    async with await aio_pika.connect(settings.rabbitmq.url, timeout=5) as connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.dead", f"{queue}.alone", f"{queue}.paused",
                     f"{queue}.cancelled", *tiers):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")


def story(life: Life) -> None:
    """Enqueue, watch, then be the operator."""
    print(f"\n== {life.transport}: queue {life.queue}\n")
    life.jobq("init", show=False)
    (life.work / "bug").touch()
    ids = asyncio.run(life.enqueue())
    print(f"  enqueued from Python: {', '.join(f'{k} {v}' for k, v in ids.items())} "
          f"(remind with a 2 s delay)\n  $ jobq consume -A examples.life.life_tasks:app ...")
    life.start_consumer()
    life.wait("welcome, the retried sync_crm and the delayed remind",
              lambda: life.done() >= EXPECTED)
    life.wait("charge dead after its 2 attempts", lambda: len(life.dead()) == 1)
    print(f"\n  done: {', '.join(sorted(life.done()))}; charge is dead. The operator looks:")
    life.jobq("dead", "list")
    life.jobq("jobs", "show", ids["charge"])
    print("\n  The fix is deployed (the demo deletes its bug file); the dead job runs again:")
    (life.work / "bug").unlink()
    life.jobq("jobs", "retry", ids["charge"])
    life.wait("the retried charge", lambda: "charge Ada" in life.done())
    print("  charge Ada done. The consumer stops on SIGTERM:")
    life.stop_consumer()


def drain_rate(transport: str, jobs: int = 5000) -> float:
    """Jobs per second of `jobq consume -p noop --once` over ``jobs`` enqueued beforehand."""
    with tempfile.TemporaryDirectory() as tmp:
        life = Life(transport, Path(tmp))
        try:
            life.jobq("init", show=False)
            life.jobq("enqueue", "--count", str(jobs), "--kind", "noop", show=False)
            stats = Path(tmp) / "stats.json"
            subprocess.run([str(BIN / "jobq"), "consume", "-c", life.config, "-q", life.queue,
                            "-p", "noop", "--once", "--log-level", "warning",
                            "--stats-json", str(stats)], env=life.env, check=True, timeout=300)
            return float(json.loads(stats.read_text())["jobs_per_second"])
        finally:
            life.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Both backends' stories, then the figure."""
    parser = argparse.ArgumentParser(prog="python -m examples.life",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("transports", nargs="*", metavar="postgres|rabbitmq",
                        help="default: both")
    transports = parser.parse_args(argv).transports or ["postgres", "rabbitmq"]
    if set(transports) - {"postgres", "rabbitmq"}:
        parser.error(f"unknown transport in {transports}: postgres or rabbitmq")
    started = time.monotonic()
    for transport in transports:
        with tempfile.TemporaryDirectory() as tmp:
            life = Life(transport, Path(tmp))
            try:
                story(life)
            except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                print(f"demo: {exc}", file=sys.stderr)
                return 1
            finally:
                life.stop_consumer()
                life.cleanup()
    print("\n== 5,000 no-op jobs drained by one consumer (a glimpse; python -m benchmarks "
          "measures properly)\n")
    for transport in transports:
        try:
            print(f"  {transport:9} {drain_rate(transport):8,.0f} jobs/s")
        except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as exc:
            print(f"demo: {transport}: no figure: {exc}", file=sys.stderr)
            return 1
    print(f"\nThe demo took {time.monotonic() - started:.0f} s. Watch queues in a browser: "
          "jobq dashboard -c configs/postgres.yaml -c configs/rabbitmq.yaml "
          "(http://127.0.0.1:9820)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
