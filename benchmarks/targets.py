"""The targets a benchmark can run: jobq in each backend mode, and the bare-client baselines.

A target is one entry in TARGETS: which backend space it needs, how its consumer process is
started, which baseline its figures are divided by, and the settings that make its numbers
comparable. Adding a backend mode is one entry here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.spaces import (
    BIN,
    PeerPostgresSpace,
    PeerRabbitSpace,
    PostgresSpace,
    RabbitSpace,
    Servers,
    Space,
)
from jobq.config import load_settings
from jobq.wiring.derived import pool_buffer, pool_buffer_max

ALL_SCENARIOS = frozenset({"drain", "io", "latency", "failures", "crash", "backlog"})
# A bare loop has no retries and no lease rescue: it runs the scenarios that need neither.
BASELINE_SCENARIOS = frozenset({"drain", "io", "latency", "backlog"})
# Transaction mode holds a connection per running job: 8 workers per process keeps four
# processes (drain x4) well inside a shared server's max_connections.
TXN_WORKERS = 8
TXN_JOB_SCALE = 0.2
# procrastinate fetches and finishes one job per round trip each (about 25x slower than jobq on
# a drain here): it drains a tenth of the jobs, so its cases end in seconds, not minutes.
PROCRASTINATE_JOB_SCALE = 0.1
# raw-pika-tuned: the fastest settings found for the bare pika loop (docs/benchmark.md).
TUNED_PREFETCH = 1000
TUNED_ACK_EVERY = 100


@dataclass(frozen=True, kw_only=True)
class Work:
    """What each job does: ``noop``, ``sleep`` (ms) or ``flaky`` (retryable/permanent rates)."""

    kind: Literal["noop", "sleep", "flaky"] = "noop"
    sleep_ms: float = 0.0
    retry_rate: float = 0.0
    fail_rate: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How to start one consumer of a case."""

    record_dir: Path
    work: Work
    concurrency: int
    once: bool
    stats_json: Path | None = None
    gate: Path | None = None  # no job completes before this file exists


@dataclass(frozen=True, kw_only=True)
class Target:
    """One thing to measure."""

    name: str
    backend: Literal["postgres", "rabbitmq"]
    family: Literal["jobq", "baseline", "peer"]
    description: str
    space: Callable[[Servers, dict[str, str]], Space]
    consumer: Callable[[Target, Space, Launch], list[str]]
    env: Mapping[str, str] = field(default_factory=dict)  # JOBQ_* overrides for this mode
    baseline: str | None = None
    scenarios: frozenset[str] = ALL_SCENARIOS
    settings: Callable[[Target, Space, int], dict[str, Any]] | None = None
    goal_vs_baseline: float | None = None  # issue goal: drain x1 throughput / baseline's
    goal_p99_ms: float | None = None  # issue goal: p99 latency at 1,000 jobs/s offered
    # The fastest bare loop of the backend (raw-pg-min, raw-pika-tuned), when it runs too: the
    # drain x1's ratio to it and its consumer CPU per job beside the loop's (issue 38's goals).
    ceiling: str | None = None
    goal_vs_ceiling: float | None = None
    # A cap on the scenario's concurrency, for targets that hold a server connection per
    # running job (the server's max_connections is shared with everyone).
    max_concurrency: int | None = None
    # Job counts of the pre-enqueued scenarios are multiplied by this: a target ~20x slower
    # than the others drains fewer jobs so the whole run stays within its time budget (its
    # figures are rates, and its baseline gets the same count).
    job_scale: float = 1.0
    # A peer's own producer (``benchmarks.peers``); None: jobq's ``producer`` command.
    producer: Callable[[Target, Space, int, float], list[str]] | None = None
    # Why it runs none of the other scenarios (the report says so, rather than leave it out).
    cannot: Mapping[str, str] = field(default_factory=dict)
    module: str | None = None  # the library a peer needs (the ``peers`` extra)

    def make_space(self, servers: Servers, extra: Mapping[str, str] | None = None) -> Space:
        """A fresh space for one case, with this target's environment on top."""
        return self.space(servers, {**self.env, **(extra or {})})

    def describe_settings(self, space: Space, concurrency: int) -> dict[str, Any]:
        """What the report shows about this target's configuration."""
        return self.settings(self, space, concurrency) if self.settings else {}


def jobq_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """The real ``consumer`` console script with a benchmark processor."""
    choices: dict[str, tuple[str, dict[str, object]]] = {
        "noop": ("record", {}),
        "sleep": ("sleep", {"ms": launch.work.sleep_ms}),
        "flaky": ("flaky", {"retry_rate": launch.work.retry_rate,
                            "fail_rate": launch.work.fail_rate}),
    }
    spec, args = choices[launch.work.kind][0], dict(choices[launch.work.kind][1])
    argv = [str(BIN / "consumer"), "--config", str(space.config), "--queue", space.queue,
            "--concurrency", str(launch.concurrency),
            "--processor", f"benchmarks.processors:{spec}", "-a", f"dir={launch.record_dir}"]
    if launch.gate is not None:
        args["gate"] = str(launch.gate)
    for key, value in args.items():
        argv += ["-a", f"{key}={value}"]
    if launch.once:
        argv.append("--once")
    if launch.stats_json is not None:
        argv += ["--stats-json", str(launch.stats_json)]
    return argv


def jobq_tasks_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """The real ``consumer`` running benchmarks.tasks_app's no-op task (``-A``): what the
    ``noop`` work of ``jobq_consumer`` does, as a task."""
    assert launch.work.kind == "noop"
    env = [f"JOBQ_BENCH_RECORD_DIR={launch.record_dir}"]
    if launch.gate is not None:
        env.append(f"JOBQ_BENCH_GATE={launch.gate}")
    argv = ["/usr/bin/env", *env, str(BIN / "consumer"), "--config", str(space.config),
            "--queue", space.queue, "--concurrency", str(launch.concurrency),
            "--app", "benchmarks.tasks_app:app"]
    if launch.once:
        argv.append("--once")
    if launch.stats_json is not None:
        argv += ["--stats-json", str(launch.stats_json)]
    return argv


def raw_pg_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """``python -m benchmarks.baselines.pg_batch``: the bare psycopg batch-claim loop."""
    assert isinstance(space, PostgresSpace)
    argv = [sys.executable, "-m", "benchmarks.baselines.pg_batch", "--dsn", space.servers.pg_dsn,
            "--schema", space.schema, "--queue", space.queue, "--dir", str(launch.record_dir),
            "--sleep-ms", str(launch.work.sleep_ms)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def raw_pg_one_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """``python -m benchmarks.baselines.pg_one``: N connections, one job per transaction."""
    assert isinstance(space, PostgresSpace)
    argv = [sys.executable, "-m", "benchmarks.baselines.pg_one", "--dsn", space.servers.pg_dsn,
            "--schema", space.schema, "--queue", space.queue, "--dir", str(launch.record_dir),
            "--sleep-ms", str(launch.work.sleep_ms), "--workers", str(launch.concurrency)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def raw_amqp_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """``python -m benchmarks.baselines.amqp``: the bare aio-pika consumer."""
    assert isinstance(space, RabbitSpace)
    argv = [sys.executable, "-m", "benchmarks.baselines.amqp", "--url", space.servers.amqp_url,
            "--queue", space.queue, "--dir", str(launch.record_dir),
            "--sleep-ms", str(launch.work.sleep_ms)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def raw_pika_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """``python -m benchmarks.baselines.pika_consumer``: the bare pika consumer (tuned: a
    larger prefetch, acks of many at once)."""
    assert isinstance(space, RabbitSpace)
    argv = [sys.executable, "-m", "benchmarks.baselines.pika_consumer",
            "--url", space.servers.amqp_url, "--queue", space.queue,
            "--dir", str(launch.record_dir)]
    if target.name == "raw-pika-tuned":
        argv += ["--prefetch", str(TUNED_PREFETCH), "--ack-every", str(TUNED_ACK_EVERY)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def raw_min_argv(command: str, space: Space) -> list[str]:
    """``python -m benchmarks.baselines.pg_min <command>`` on the case's schema."""
    assert isinstance(space, PostgresSpace)
    return [sys.executable, "-m", "benchmarks.baselines.pg_min", command, "--dsn",
            space.servers.pg_dsn, "--schema", space.schema, "--queue", space.queue]


def raw_min_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """The minimal-table loop, draining."""
    argv = [*raw_min_argv("consume", space), "--dir", str(launch.record_dir)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def raw_min_producer(target: Target, space: Space, count: int, rate: float) -> list[str]:
    """The minimal table, filled by its own module (jobq's producer writes jobq's table)."""
    return [*raw_min_argv("produce", space), "--dir", "-", "--count", str(count),
            "--rate", str(rate)]


def raw_min_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The minimal loop's fixed choices."""
    return {"table": "id bigserial primary key, payload jsonb (nothing else)",
            "claim": "BEGIN; SELECT ... ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED; run; "
                     "DELETE ... WHERE id = ANY; COMMIT", "connections": 1,
            "commit": "server default (synchronous_commit as in Environment)"}


def peer_args(space: Space) -> list[str]:
    """Where a peer's jobs are: the server and the case's schema, or its queue."""
    if isinstance(space, PostgresSpace):
        return ["--dsn", space.servers.pg_dsn, "--schema", space.schema, "--queue", space.queue]
    assert isinstance(space, RabbitSpace)
    return ["--url", space.servers.amqp_url, "--queue", space.queue]


def peer_consumer(target: Target, space: Space, launch: Launch) -> list[str]:
    """``python -m benchmarks.peers.<peer> consume``: the peer's own worker."""
    argv = [sys.executable, "-m", f"benchmarks.peers.{target.name}_peer", "consume",
            *peer_args(space), "--dir", str(launch.record_dir), "--sleep-ms",
            str(launch.work.sleep_ms), "--concurrency", str(launch.concurrency)]
    if launch.gate is not None:
        argv += ["--gate", str(launch.gate)]
    return argv + (["--once"] if launch.once else [])


def peer_producer(target: Target, space: Space, count: int, rate: float) -> list[str]:
    """``python -m benchmarks.peers.<peer> produce``: the peer's own enqueue."""
    return [sys.executable, "-m", f"benchmarks.peers.{target.name}_peer", "produce",
            *peer_args(space), "--count", str(count), "--rate", str(rate)]


def peer_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """What each peer is run with (its module's docstring says why)."""
    from importlib.metadata import version

    fixed = {"pgqueuer": {"driver": "psycopg (async)",
                          "batch_size": max(1, min(100, concurrency // 2)),
                          "max_concurrent_tasks": concurrency,
                          "enqueue": "lists of 1,000",
                          "commit": "server default (synchronous_commit as in Environment)"},
             "procrastinate": {"connector": "PsycopgConnector", "concurrency": concurrency,
                               "listen_notify": True, "delete_jobs": "never (its default)",
                               "enqueue": "batch_defer_async, 1,000 at a time",
                               "commit": "server default (synchronous_commit as in Environment)"},
             "dramatiq": {"broker": "RabbitmqBroker (pika)", "queue_type": "classic (dramatiq's)",
                          "worker_threads": concurrency, "prefetch": 2 * concurrency,
                          "enqueue": "actor.send, one message each",
                          "publisher_confirms": "off (confirm_delivery, its default)"},
             "celery": {"broker": "RabbitMQ via kombu (py-amqp)",
                        "queue_type": "classic (Celery's default queue, durable)",
                        "pool": "threads (one worker process)", "concurrency": concurrency,
                        "prefetch": f"{4 * concurrency} (worker_prefetch_multiplier 4, "
                                    "its default)",
                        "acks_late": "on (its default is off; jobq acks after the job)",
                        "results": "none (task_ignore_result)",
                        "enqueue": "apply_async, one message each",
                        "publisher_confirms": "off (its default)"}}
    return {"version": version(target.module or target.name), **fixed[target.name]}


def jobq_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The consumer's effective configuration, read the way the consumer reads it."""
    s = load_settings(space.config, {"consumer.concurrency": concurrency}, env=space.env)
    out: dict[str, Any] = {"concurrency": concurrency, "buffer": s.consumer.buffer_size,
                           "event_loop": s.event_loop}
    if target.backend == "postgres":
        pg = s.postgres
        grown = pool_buffer_max(s)
        if grown:
            out["buffer"] = f"{s.consumer.buffer_size}, grown to {grown} for short jobs (sizing.py)"
        out.update(claim=pg.claim, claim_batch_max=concurrency + max(pool_buffer(s), grown),
                   commit=("claims and acks synchronous_commit=off (per statement)"
                           if pg.async_commit else "claims and acks: server default")
                   if pg.claim == "lease" else "server default (the job's own transaction)",
                   ack_batch=pg.ack_batch, ack_interval_s=pg.ack_interval, lease_s=pg.lease,
                   notify=pg.notify, poll_interval_s=pg.poll_interval)
        if pg.claim == "transaction":
            out["pick_ahead"] = pg.pick_ahead
    else:
        rmq = s.rabbitmq
        out.update(queue_type=rmq.queue_type,
                   prefetch=rmq.prefetch or concurrency + s.consumer.buffer_size,
                   acks="batched, multiple=True", ack_interval_s=rmq.ack_interval,
                   publisher_confirms="on (producer, retries)")
    return out


def raw_pg_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The baseline's fixed choices."""
    return {"claim_batch": 100, "ack": "one UPDATE per claimed batch", "poll_interval_s": 0.01,
            "commit": "server default (synchronous_commit as in Environment)",
            "concurrency": "the claimed batch (gathered) when jobs sleep"}


def raw_pg_one_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The one-at-a-time baseline's fixed choices."""
    return {"workers": concurrency, "connections": concurrency,
            "claim": "BEGIN; ... ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED; run; UPDATE; COMMIT",
            "commit": "server default (synchronous_commit as in Environment)"}


def raw_amqp_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The baseline's fixed choices."""
    s = load_settings(space.config, env=space.env)
    return {"queue_type": s.rabbitmq.queue_type, "prefetch": 100, "acks": "one per message",
            "event_loop": "asyncio default", "concurrency": "the prefetch window",
            "publisher_confirms": "on (jobq's producer)"}


def raw_pika_settings(target: Target, space: Space, concurrency: int) -> dict[str, Any]:
    """The pika baseline's fixed choices."""
    s = load_settings(space.config, env=space.env)
    tuned = target.name == "raw-pika-tuned"
    return {"queue_type": s.rabbitmq.queue_type, "prefetch": TUNED_PREFETCH if tuned else 100,
            "acks": f"multiple=True every {TUNED_ACK_EVERY} messages (and at a pause)" if tuned
            else "one per message",
            "client": "pika BlockingConnection (no event loop)",
            "concurrency": "one callback at a time", "publisher_confirms": "on (jobq's producer)"}


def _pg(servers: Servers, env: dict[str, str]) -> Space:
    return PostgresSpace(servers, env)


def _rmq(servers: Servers, env: dict[str, str]) -> Space:
    return RabbitSpace(servers, env)


def _peer_pg(name: str) -> Callable[[Servers, dict[str, str]], Space]:
    return lambda servers, env: PeerPostgresSpace(servers, env, peer=name)


def _peer_rmq(name: str) -> Callable[[Servers, dict[str, str]], Space]:
    return lambda servers, env: PeerRabbitSpace(servers, env, peer=name)


PEER_SCENARIOS = frozenset({"drain", "io", "latency"})
NOT_PEER = {"failures": "its retry and dead-letter settings differ from jobq's: not compared",
            "crash": "not driven here: each peer recovers a killed worker its own way",
            "backlog": "not driven here: the report reads jobq's table and queue for it"}


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target(name="postgres-lease", backend="postgres", family="jobq", space=_pg,
           consumer=jobq_consumer, settings=jobq_settings, baseline="raw-psycopg",
           env={"JOBQ_POSTGRES__CLAIM": "lease"}, goal_vs_baseline=0.9, goal_p99_ms=20.0,
           ceiling="raw-pg-min", goal_vs_ceiling=0.8,
           description="jobq consumer, Postgres lease mode (batch claims, batched acks)"),
    Target(name="postgres-lease-tasks", backend="postgres", family="jobq", space=_pg,
           consumer=jobq_tasks_consumer, settings=jobq_settings,
           env={"JOBQ_POSTGRES__CLAIM": "lease"}, scenarios=frozenset({"drain"}),
           cannot={s: "a task's cost is measured on the drain only (beside postgres-lease)"
                   for s in ("io", "latency", "failures", "crash", "backlog")},
           description="postgres-lease with its no-op job as a task of a jobq.App (-A): "
                       "routing, typed arguments"),
    Target(name="raw-psycopg", backend="postgres", family="baseline", space=_pg,
           consumer=raw_pg_consumer, settings=raw_pg_settings, scenarios=BASELINE_SCENARIOS,
           description="bare psycopg loop: CTE LIMIT 100 FOR UPDATE SKIP LOCKED, batched ack"),
    Target(name="postgres-transaction", backend="postgres", family="jobq", space=_pg,
           consumer=jobq_consumer, settings=jobq_settings, baseline="raw-psycopg-one",
           env={"JOBQ_POSTGRES__CLAIM": "transaction"}, goal_vs_baseline=1.0,
           max_concurrency=TXN_WORKERS, job_scale=TXN_JOB_SCALE,
           description="jobq consumer, Postgres transaction mode (a transaction per running job)"),
    Target(name="raw-psycopg-one", backend="postgres", family="baseline", space=_pg,
           consumer=raw_pg_one_consumer, settings=raw_pg_one_settings,
           scenarios=BASELINE_SCENARIOS, max_concurrency=TXN_WORKERS, job_scale=TXN_JOB_SCALE,
           description="bare psycopg: N connections, a transaction per job (LIMIT 1 SKIP LOCKED)"),
    Target(name="rabbitmq-quorum", backend="rabbitmq", family="jobq", space=_rmq,
           consumer=jobq_consumer, settings=jobq_settings, baseline="raw-pika",
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "quorum"}, goal_vs_baseline=1.0, goal_p99_ms=10.0,
           ceiling="raw-pika-tuned", goal_vs_ceiling=1.0,
           description="jobq consumer, RabbitMQ quorum queue"),
    Target(name="rabbitmq-classic", backend="rabbitmq", family="jobq", space=_rmq,
           consumer=jobq_consumer, settings=jobq_settings, baseline="raw-pika-classic",
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "classic"}, goal_vs_baseline=1.0, goal_p99_ms=10.0,
           description="jobq consumer, RabbitMQ classic queue"),
    Target(name="raw-aio-pika", backend="rabbitmq", family="baseline", space=_rmq,
           consumer=raw_amqp_consumer, settings=raw_amqp_settings, scenarios=BASELINE_SCENARIOS,
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "quorum"},
           description="bare aio-pika consumer on a quorum queue: prefetch 100, an ack per message"),
    Target(name="raw-aio-pika-classic", backend="rabbitmq", family="baseline", space=_rmq,
           consumer=raw_amqp_consumer, settings=raw_amqp_settings, scenarios=frozenset({"drain"}),
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "classic"},
           description="the same bare consumer on a classic queue"),
    Target(name="raw-pika", backend="rabbitmq", family="baseline", space=_rmq,
           consumer=raw_pika_consumer, settings=raw_pika_settings,
           scenarios=frozenset({"drain", "latency", "backlog"}),
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "quorum"},
           description="bare pika (BlockingConnection) on a quorum queue: prefetch 100, an ack "
                       "per message; the fastest Python client, the RabbitMQ targets' yardstick"),
    Target(name="raw-pika-classic", backend="rabbitmq", family="baseline", space=_rmq,
           consumer=raw_pika_consumer, settings=raw_pika_settings, scenarios=frozenset({"drain"}),
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "classic"},
           description="the same bare pika consumer on a classic queue (rabbitmq-classic's)"),
    Target(name="postgres-lease-sync", backend="postgres", family="jobq", space=_pg,
           consumer=jobq_consumer, settings=jobq_settings, baseline="raw-psycopg",
           env={"JOBQ_POSTGRES__CLAIM": "lease", "JOBQ_POSTGRES__ASYNC_COMMIT": "false"},
           scenarios=frozenset({"drain", "latency"}), ceiling="raw-pg-min",
           cannot={s: "measured on the drain and the latency only (beside postgres-lease)"
                   for s in ("io", "failures", "crash", "backlog")},
           description="postgres-lease with postgres.async_commit false: claims and acks wait "
                       "for the WAL flush, as the peers' and the raw loops' commits do"),
    Target(name="raw-pg-min", backend="postgres", family="baseline", space=_pg,
           consumer=raw_min_consumer, producer=raw_min_producer, settings=raw_min_settings,
           scenarios=frozenset({"drain"}),
           cannot={s: "a ceiling of the drain: it has no wake-up, retries nor lease"
                   for s in ("io", "latency", "failures", "crash", "backlog")},
           description="the PostgreSQL ceiling: a batch loop over a table of two columns "
                       "(id, payload), SKIP LOCKED, deleted at commit"),
    Target(name="raw-pika-tuned", backend="rabbitmq", family="baseline", space=_rmq,
           consumer=raw_pika_consumer, settings=raw_pika_settings,
           scenarios=frozenset({"drain"}),
           cannot={s: "a ceiling of the drain (beside raw-pika, which runs the latency)"
                   for s in ("io", "latency", "failures", "crash", "backlog")},
           env={"JOBQ_RABBITMQ__QUEUE_TYPE": "quorum"},
           description="the RabbitMQ ceiling: bare pika on a quorum queue, prefetch 1,000, "
                       "acks multiple=True every 100"),
    Target(name="pgqueuer", backend="postgres", family="peer", space=_peer_pg("pgqueuer"),
           consumer=peer_consumer, producer=peer_producer, settings=peer_settings,
           baseline="raw-psycopg", scenarios=PEER_SCENARIOS, cannot=NOT_PEER,
           module="pgqueuer",
           description="peer: pgqueuer's QueueManager (psycopg driver), batches up to 100"),
    Target(name="procrastinate", backend="postgres", family="peer",
           space=_peer_pg("procrastinate"), consumer=peer_consumer, producer=peer_producer,
           settings=peer_settings, baseline="raw-psycopg", scenarios=PEER_SCENARIOS,
           cannot=NOT_PEER, module="procrastinate", job_scale=PROCRASTINATE_JOB_SCALE,
           description="peer: procrastinate's async worker (psycopg connector), one job per fetch"),
    Target(name="dramatiq", backend="rabbitmq", family="peer", space=_peer_rmq("dramatiq"),
           consumer=peer_consumer, producer=peer_producer, settings=peer_settings,
           baseline="raw-pika-classic", scenarios=PEER_SCENARIOS, cannot=NOT_PEER,
           module="dramatiq",
           description="peer: dramatiq's threaded Worker on its own (classic) queue, pika broker"),
    Target(name="celery", backend="rabbitmq", family="peer", space=_peer_rmq("celery"),
           consumer=peer_consumer, producer=peer_producer, settings=peer_settings,
           baseline="raw-pika-classic", scenarios=PEER_SCENARIOS, cannot=NOT_PEER,
           module="celery",
           description="peer: one Celery worker, threads pool, acks_late, on its own (classic) "
                       "queue, py-amqp broker"),
)}
# The targets a run takes unless --targets names others: jobq and its baselines. The peers
# need the peers extra and are asked for by name (--targets peers adds all four).
# postgres-lease-tasks too is asked for by name: it measures what a task adds, not a backend.
# So are the ceilings and the synchronous lease target, which answer issue 38's questions.
BY_NAME = ("postgres-lease-tasks", "postgres-lease-sync", "raw-pg-min", "raw-pika-tuned")
DEFAULT_TARGETS = tuple(n for n, t in TARGETS.items()
                        if t.family != "peer" and n not in BY_NAME)
PEERS = tuple(n for n, t in TARGETS.items() if t.family == "peer")
