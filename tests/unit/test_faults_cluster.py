"""The failover drills' own arithmetic: when the drain counts as recovered, who starts where."""

from __future__ import annotations

from faults.cluster.backends import ClusterRabbit
from faults.cluster.nodes import RabbitCluster
from faults.cluster.run import recovery
from faults.cluster.standby import PostgresPair


def steady(start: float, end: float, rate: float, n0: int = 0) -> list[tuple[float, int]]:
    """Samples every 0.2 s of a drain at ``rate`` jobs/s from ``start`` to ``end``."""
    steps = round((end - start) / 0.2)
    return [(start + i * 0.2, n0 + round(i * 0.2 * rate)) for i in range(steps + 1)]


def test_recovery_is_when_a_second_of_completions_reaches_half_the_rate_before() -> None:
    before = steady(0, 10, 1000)  # 1,000/s up to the fault at t=10
    stalled = [(10 + i * 0.2, 10_000) for i in range(1, 16)]  # nothing for 3 s
    after = steady(13.2, 20, 1000, n0=10_000)
    rate, recovered = recovery(before + stalled + after, fault_at=10.0)
    assert rate == 1000
    # The first window wholly after the fault holding 500 completions ends near 13.7 s.
    assert recovered is not None and 2.6 <= recovered <= 2.8


def test_a_fault_without_a_dip_recovers_in_0_and_start_up_is_not_the_rate() -> None:
    starting = [(i * 0.2, 0) for i in range(10)]  # 2 s of start-up: nothing completes
    rate, recovered = recovery(starting + steady(2, 12, 1000), fault_at=5.0)
    assert round(rate) == 1000 and recovered == 0.0


def test_no_fault_or_no_recovery_is_none() -> None:
    assert recovery(steady(0, 5, 100), None) == (0.0, None)
    rate, recovered = recovery([*steady(0, 10, 1000), (11.0, 10_000), (12.0, 10_000)], 10.0)
    assert rate == 1000 and recovered is None


def test_each_consumer_starts_at_another_node_and_the_dsn_names_both_servers() -> None:
    cluster = RabbitCluster(first_port=6001)
    pair = PostgresPair(first_port=6101)
    try:
        rabbit = ClusterRabbit(cluster)
        assert rabbit.urls(1) == ["amqp://guest:guest@127.0.0.1:6002/",
                                  "amqp://guest:guest@127.0.0.1:6003/",
                                  "amqp://guest:guest@127.0.0.1:6001/"]
        assert [n.dist_port for n in cluster.nodes] == [26001, 26002, 26003]
        assert pair.failover_dsn == ("postgresql://postgres@127.0.0.1:6101,127.0.0.1:6102/"
                                     "postgres?target_session_attrs=read-write")
    finally:
        cluster.stop()
        pair.stop()
