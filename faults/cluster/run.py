"""One failover drill: the fault suite's run, with a producer going on through the fault, a
timeline of completions, and the time the consumers took to get back to speed.

The run is faults/suite.py's Run with one server fault (the failover, at 30 % of the jobs), no
consumer kills and no cut connections: what is measured is the failover alone. Its verdict is
the suite's (faults/verdict.py): nothing lost, nothing dead, every job done, duplicates within
capacity x exposures + the jobs of the crash window, every consumer alive and exiting 0 on
SIGTERM. On top:

- the producer: a thread enqueueing ``--produce`` more jobs through the same nodes (every node
  URL, the two-host DSN) while the drain runs, at ``--produce-rate``. A batch refused with a
  lost connection is sent again; one whose fate is unknown (OutcomeUnknown) is not, and its
  jobs count as accepted only if they ran (they may have reached the broker, and running
  them is the at-least-once answer, never a loss). Its longest wait for an accepted batch
  after the fault is the producer's stall.
- recovery: the seconds from the fault to the start of the first one-second window, wholly
  after it, whose completions reach half the rate of the (up to) five seconds before it,
  counted from the first completion (sampled every 0.2 s from the completion record); a
  fault that costs no dip reads 0.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from faults.backend import Backend, Options
from faults.report import Summary
from faults.suite import Run
from jobq.api import connect_publisher
from jobq.config import Settings
from jobq.core.errors import JobqError, OutcomeUnknown
from jobq.core.port import NewJob
from tests.processors import completions

SAMPLE_S = 0.2
BEFORE_S = 5.0  # the pre-fault rate is taken over this long
RECOVERED = 0.5  # of the pre-fault rate, over one second


@dataclass
class ClusterSummary(Summary):
    """A drill's summary: the suite's, with the fault, the producer and the recovery."""

    fault: str = ""
    produced: int = 0  # accepted from the producer that ran during the drain
    producer_errors: int = 0
    producer_stall_s: float = 0.0
    in_doubt: int = 0  # producer jobs whose enqueue outcome was unknown
    recovered_s: float | None = None
    rate_before: float = 0.0
    errors: list[str] = field(default_factory=list)

    def line(self, of: int = 1) -> str:
        """The drill's result line."""
        round_ = f" run={self.run}/{of}" if of > 1 else ""
        recovered = "never" if self.recovered_s is None else f"{self.recovered_s:.1f}s"
        return (f"cluster {self.transport}: {self.fault or 'no fault'}; jobs={self.jobs} "
                f"(produced during the drain {self.produced}, in doubt {self.in_doubt}) "
                f"lost={self.lost} duplicates={self.duplicates}/{self.duplicate_bound} "
                f"dead={self.dead} unfinished={self.unfinished} recovered={recovered} "
                f"(to {RECOVERED:.0%} of {self.rate_before:.0f} jobs/s) "
                f"producer_stall={self.producer_stall_s:.1f}s producer_errors="
                f"{self.producer_errors} survivors_exit_0={self.survivors_exit_0}/"
                f"{self.survivors} wall={self.wall_s:.1f}s{round_} "
                f"{'OK' if self.ok else 'FAILED'}")


class Producer(threading.Thread):
    """Enqueues ``count`` jobs at ``rate``/s in batches, through a failover, on its own loop."""

    def __init__(self, settings: Settings, count: int, rate: float, deadline: float,
                 fault_at: Callable[[], float | None], batch: int = 50) -> None:
        super().__init__(name="cluster-producer", daemon=True)
        self.settings, self.count, self.rate, self.batch = settings, count, rate, batch
        self.deadline = deadline
        self.fault_at = fault_at
        self.stop = threading.Event()  # the drill is over: stop sending
        self.accepted: list[str] = []
        self.in_doubt: list[str] = []
        self.errors: list[str] = []
        self.stall = 0.0

    def run(self) -> None:
        try:
            asyncio.run(self._produce())
        except Exception as exc:  # the drill reports it: it must not vanish
            self.errors.append(f"producer stopped: {type(exc).__name__}: {exc}")

    async def _produce(self) -> None:
        started = last_ok = time.monotonic()
        async with connect_publisher(self.settings) as publisher:
            sent = 0
            while sent < self.count and time.monotonic() < self.deadline \
                    and not self.stop.is_set():
                jobs = [NewJob(kind="chaos", payload={"n": f"p{sent + i}"})
                        for i in range(min(self.batch, self.count - sent))]
                try:
                    self.accepted.extend(await publisher.enqueue_many(jobs))
                except OutcomeUnknown as exc:
                    self.accepted.extend(exc.accepted)
                    self.in_doubt.extend(exc.maybe)
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                except JobqError as exc:  # not enqueued (but those it names): the rest again
                    accepted = tuple(getattr(exc, "accepted", ()))
                    self.accepted.extend(accepted)
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    if not accepted:
                        await asyncio.sleep(0.2)
                        continue
                now = time.monotonic()
                fault = self.fault_at()
                if fault is not None and now > fault:
                    self.stall = max(self.stall, now - max(last_ok, fault))
                last_ok = now
                sent += len(jobs)
                ahead = started + sent / self.rate - now
                if ahead > 0:
                    await asyncio.sleep(ahead)


class ClusterRun(Run):
    """The suite's Run for one failover, with a producer and a completion timeline."""

    summary: ClusterSummary

    def __init__(self, backend: Backend, settings: Callable[[], Settings], options: Options,
                 workdir: Path, logs_to: Path, run: int, produce: int, produce_rate: float) -> None:
        super().__init__(backend, options, workdir, logs_to, run)
        self.summary = ClusterSummary(transport=backend.name, run=run, jobs=options.jobs)
        self.server_faults.summary = self.summary
        self.producer_settings = settings
        self.produce, self.produce_rate = produce, produce_rate
        self.samples: list[tuple[float, int]] = []
        self._sampling = threading.Event()

    def _fault_at(self) -> float | None:
        return getattr(self.backend, "fault_at", None)

    def _sample(self) -> None:
        while not self._sampling.wait(SAMPLE_S):
            self.samples.append((time.monotonic(), len(completions(self.record))))

    def shake(self) -> None:
        """The suite's shake, with the producer and the sampler running; it goes on until the
        producer is done and every job has ended."""
        sampler = threading.Thread(target=self._sample, name="cluster-sampler", daemon=True)
        sampler.start()
        producer = Producer(self.producer_settings(), self.produce, self.produce_rate,
                            time.monotonic() + self.options.timeout, self._fault_at)
        producer.start()
        try:
            while True:
                super().shake()
                if not producer.is_alive() or self.summary.problems:
                    break
                producer.join(1.0)
            producer.join(30)
            super().shake()  # what the producer's last batches added
        finally:
            producer.stop.set()
            producer.join(30)
            self._sampling.set()
            sampler.join(5)
        if producer.is_alive():
            self.summary.problems.append("the producer did not stop within 30 s")
        self.producer = producer
        s = self.summary
        s.produced, s.in_doubt = len(producer.accepted), len(producer.in_doubt)
        s.producer_errors, s.producer_stall_s = len(producer.errors), producer.stall
        s.errors = producer.errors[:5]
        if any(e.startswith("producer stopped") for e in producer.errors):
            s.problems.append(producer.errors[-1])
        s.fault = str(getattr(self.backend, "fault", ""))
        s.rate_before, s.recovered_s = recovery(self.samples, self._fault_at())

    def check(self, accepted: list[str]) -> None:
        """The suite's check over the jobs enqueued first, the producer's accepted ones, and
        those of its in-doubt ones that ran."""
        producer: Producer | None = getattr(self, "producer", None)
        if producer is not None:
            ran = set(completions(self.record))
            accepted = [*accepted, *producer.accepted, *(i for i in producer.in_doubt if i in ran)]
        self.summary.jobs = len(accepted)
        super().check(accepted)


def recovery(samples: list[tuple[float, int]], fault_at: float | None
             ) -> tuple[float, float | None]:
    """The rate before the fault, and the seconds after it until one second's completions
    reached RECOVERED of that rate (None: never, or no fault)."""
    if fault_at is None or not samples:
        return 0.0, None

    def count_at(t: float) -> int:
        return max((n for at, n in samples if at <= t), default=0)

    # From the first completion on (the consumers' start-up is not the rate), at most
    # BEFORE_S back from the fault.
    first = next((at for at, n in samples if n > 0), fault_at)
    start = max(first, fault_at - BEFORE_S)
    rate = (count_at(fault_at) - count_at(start)) / max(fault_at - start, SAMPLE_S)
    for at, n in samples:
        # A window wholly after the fault; reported by its start, so no dip at all reads 0.
        if at - 1.0 >= fault_at and n - count_at(at - 1.0) >= RECOVERED * rate > 0:
            return rate, at - 1.0 - fault_at
    return rate, None
