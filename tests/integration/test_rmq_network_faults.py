"""RabbitMQ under network faults, through the fault proxy: a partition longer than the heartbeat,
a stall during shutdown, resets in the middle of ack batches, a publisher whose connection is
reset. The broker itself is never touched; the consumers' AMQP URL points at the proxy with a
2 s heartbeat (aiormq declares a link dead after (heartbeat + 1) x 3 = 9 s of silence)."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pytest

from jobq.config import ConnectConfig, LimitsConfig, RabbitConfig
from jobq.core.errors import ConnectionLost, OutcomeUnknown
from jobq.core.port import NewJob
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.publisher import RabbitPublisher
from tests.conftest import AMQP_URL, command, stop_cli, wait_until
from tests.contract.backends import Backend
from tests.faultproxy import FaultProxy
from tests.processors import completions

RECORD = "tests.processors:record"
HEARTBEAT = 2
DETECT = (HEARTBEAT + 1) * 3 + 1 + 3  # aiormq's grace, the supervisor's look, a slow machine
PUBLISH_TIMEOUT = 2.0


@pytest.fixture
def amqp_proxy(amqp_url: str, fault_proxy: Callable[[str, int], FaultProxy]) -> FaultProxy:
    """A fault proxy in front of the test RabbitMQ."""
    return fault_proxy("127.0.0.1", 5672)


def proxied_url(proxy: FaultProxy) -> str:
    return f"amqp://guest:guest@127.0.0.1:{proxy.port}/?heartbeat={HEARTBEAT}"


def faulty_env(rabbit: Backend, proxy: FaultProxy, **extra: str) -> dict[str, str]:
    env = dict(rabbit.env, JOBQ_AMQP_URL=proxied_url(proxy), JOBQ_CONNECT__BACKOFF_BASE="0.1",
               JOBQ_CONNECT__BACKOFF_MAX="0.5", JOBQ_CONNECT__TIMEOUT="1",
               JOBQ_RABBITMQ__PUBLISH_TIMEOUT=str(PUBLISH_TIMEOUT))
    env.update({f"JOBQ_{k}": v for k, v in extra.items()})
    return env


def consumer(rabbit: Backend, env: dict[str, str], directory: Path, log: Path, *extra: str
             ) -> subprocess.Popen[str]:
    """A consumer CLI whose stderr goes to ``log`` (read while it runs)."""
    return subprocess.Popen(
        [command("consumer"), *rabbit.args(), "-p", RECORD, "-a", f"directory={directory}", *extra],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True, env=env)




def distinct(directory: Path) -> int:
    return len(set(completions(directory)))


@pytest.mark.slow
def test_partition_longer_than_the_heartbeat_is_noticed_and_ridden_out(
        rabbit: Backend, amqp_proxy: FaultProxy, tmp_path: Path) -> None:
    rabbit.produce(200)
    log, done = tmp_path / "consumer.err", tmp_path / "done"
    proc = consumer(rabbit, faulty_env(rabbit, amqp_proxy), done, log, "-a", "sleep_ms=30",
                    "-n", "4")
    try:
        assert wait_until(lambda: distinct(done) >= 20, 30), log.read_text()
        amqp_proxy.stall()
        stalled = time.monotonic()
        assert wait_until(lambda: "lost the RabbitMQ session" in log.read_text(), DETECT), \
            log.read_text()[-3000:]
        noticed = time.monotonic() - stalled
        amqp_proxy.heal()
        assert wait_until(lambda: distinct(done) == 200, 40), (distinct(done), log.read_text()[-3000:])
        # The copies of jobs held when the link went run alone, one by one (duplicates).
        assert wait_until(lambda: rabbit.waiting() == 0, 30, step=0.5), log.read_text()[-3000:]
    finally:
        amqp_proxy.heal()
        elapsed = stop_cli(proc, 40)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert noticed <= DETECT
    assert elapsed < 10


@pytest.mark.slow
def test_stall_during_shutdown_ends_within_the_stated_bound(
        rabbit: Backend, amqp_proxy: FaultProxy, tmp_path: Path) -> None:
    shutdown_timeout = 2.0
    rabbit.produce(100)
    log, done = tmp_path / "consumer.err", tmp_path / "done"
    env = faulty_env(rabbit, amqp_proxy, CONSUMER__SHUTDOWN_TIMEOUT=str(shutdown_timeout))
    proc = consumer(rabbit, env, done, log, "-a", "sleep_ms=300", "-n", "4")
    try:
        assert wait_until(lambda: distinct(done) >= 8, 30), log.read_text()
        amqp_proxy.stall()  # acks and the unstarted jobs' releases go into the black hole
        elapsed = stop_cli(proc, 60)
    finally:
        amqp_proxy.heal()
    # The stated bound (docs/architecture.md, Network faults and their bounds (RabbitMQ)):
    # shutdown_timeout + publish_timeout (the first release; the rest fail at once) + the
    # cancel's 5 s + publish_timeout (copies in flight) + 4 closes of 2 s, plus slack.
    bound = shutdown_timeout + 2 * PUBLISH_TIMEOUT + 5 + 4 * 2 + 3
    assert elapsed < bound, (elapsed, log.read_text()[-3000:])
    assert proc.returncode == 0, log.read_text()[-3000:]
    rescuer = rabbit.run("consumer", "--once", "-p", RECORD, "-a", f"directory={done}")
    assert rescuer.returncode == 0, rescuer.stderr
    assert distinct(done) == 100  # what it could not settle came back


def test_resets_in_the_middle_of_ack_batches_lose_nothing(
        rabbit: Backend, amqp_proxy: FaultProxy, tmp_path: Path) -> None:
    rabbit.produce(600)
    log, done = tmp_path / "consumer.err", tmp_path / "done"
    proc = consumer(rabbit, faulty_env(rabbit, amqp_proxy), done, log, "-a", "sleep_ms=5",
                    "-n", "8")
    try:
        for threshold in (100, 250, 400):
            assert wait_until(lambda t=threshold: distinct(done) >= t, 30), log.read_text()[-3000:]
            assert amqp_proxy.reset() >= 1  # acks are going out in batches at this rate
        assert wait_until(lambda: distinct(done) == 600, 40), (distinct(done), log.read_text()[-3000:])
        assert wait_until(lambda: rabbit.waiting() == 0, 30, step=0.5), log.read_text()[-3000:]
    finally:
        elapsed = stop_cli(proc, 40)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert log.read_text().count("lost the RabbitMQ session") >= 3
    duplicates = len(completions(done)) - distinct(done)
    assert duplicates <= 3 * 2 * 8 * 2  # per reset, at most what one consumer holds, both links
    assert elapsed < 10


async def drain_ids(queue: str) -> collections.Counter[str]:
    """Every message id in ``queue``, taken (acked) one by one."""
    ids: collections.Counter[str] = collections.Counter()
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        source = await channel.get_queue(queue, ensure=False)
        while (message := await source.get(no_ack=True, fail=False)) is not None:
            ids[str(message.message_id)] += 1
    return ids


async def test_enqueue_many_under_resets_enqueues_each_id_once_or_names_it(
        rabbit: Backend, amqp_proxy: FaultProxy) -> None:
    url = proxied_url(amqp_proxy)
    link = RabbitLink(url, ConnectConfig(timeout=1, backoff_base=0.05, backoff_max=0.2),
                      role="test")
    publisher = RabbitPublisher(link, RabbitConfig(url=url, publish_timeout=PUBLISH_TIMEOUT),
                                queue=rabbit.queue, max_attempts=3,
                                limits=LimitsConfig(enqueue_timeout=5))
    await link.open()
    await publisher.open()
    stop_resetting = threading.Event()

    def resetting() -> None:
        for _ in range(6):
            if stop_resetting.wait(0.3):
                return
            amqp_proxy.reset()

    resetter = threading.Thread(target=resetting)
    resetter.start()
    accepted: set[str] = set()
    maybe: set[str] = set()
    failed = 0
    try:
        for _ in range(12):
            try:
                accepted.update(await publisher.enqueue_many([NewJob(kind="ok", payload={"n": i})
                                                              for i in range(200)]))
            except OutcomeUnknown as exc:
                accepted.update(exc.accepted)
                maybe.update(exc.maybe)
                assert "may or may not be enqueued" in str(exc)
            except ConnectionLost:
                failed += 1  # 'not enqueued': only after 5 s without a connection
            await asyncio.sleep(0.05)
    finally:
        stop_resetting.set()
        await asyncio.to_thread(resetter.join)
        await publisher.close()
        await link.close()
    arrived = await drain_ids(rabbit.queue)
    print(f"{len(accepted)} accepted, {len(maybe)} maybe, {failed} calls failed, "
          f"{sum(arrived.values())} arrived")
    assert amqp_proxy.accepted > 1  # the resets did cut it
    assert all(arrived[i] == 1 for i in accepted), "an accepted job is missing or doubled"
    assert set(arrived) <= accepted | maybe, "a job arrived that the call did not report"
    assert all(n == 1 for n in arrived.values())
    assert failed == 0  # the proxy takes new connections at once: every call rides it out


def test_a_lull_in_deliveries_does_not_end_a_once_drain_early(
        rabbit: Backend, amqp_proxy: FaultProxy, tmp_path: Path) -> None:
    # A --once drain took one second without a delivery (while the queue said it held
    # messages) for the end: a 1,000,000-job quorum drain stopped with 690,257 left.
    rabbit.produce(1000)
    log, done = tmp_path / "consumer.err", tmp_path / "done"
    proc = consumer(rabbit, faulty_env(rabbit, amqp_proxy), done, log, "-a", "sleep_ms=2",
                    "-n", "4", "--once")
    try:
        assert wait_until(lambda: distinct(done) >= 50, 30), log.read_text()
        amqp_proxy.stall()
        # Longer than a depth probe's own deadline and one more drain_timeout, well inside
        # the heartbeat's grace (9 s).
        time.sleep(PUBLISH_TIMEOUT + 2.5)
        amqp_proxy.heal()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:  # say what the consumer was doing
            pytest.fail(f"no exit within 60 s of the heal ({distinct(done)} of 1000 done):\n"
                        + log.read_text()[-3000:])
    finally:
        amqp_proxy.heal()
        if proc.poll() is None:
            stop_cli(proc, 30)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert distinct(done) == 1000, (distinct(done), log.read_text()[-3000:])
