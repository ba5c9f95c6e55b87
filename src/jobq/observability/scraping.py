"""What one /metrics server shows: the metrics of each queue a consumer serves, as one.

A consumer of several queues (``consumer.queues``) runs a pool per queue, each with its own
``Metrics`` (labelled with its queue); its one server answers /metrics with their series
merged family by family (the text format allows each family once), /healthz with the first
queue found unhealthy, /readyz ready only when every queue is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from jobq.observability.metrics import Metrics


class Scrape:
    """The queues' metrics behind one server (``metrics.serve`` reads ``registry``,
    ``unhealthy`` and ``is_ready``)."""

    def __init__(self, first: Metrics) -> None:
        self.metrics = [first]
        self._registry: CollectorRegistry | None = None

    def add(self, metrics: Metrics) -> None:
        """Show ``metrics`` too (another queue of the process); before the server starts."""
        if self._registry is not None:
            raise RuntimeError("Scrape.add after the server started")
        self.metrics.append(metrics)

    @property
    def registry(self) -> CollectorRegistry:
        """One queue's own registry; for several, one that merges theirs, described once
        built (so that ``/metrics?name[]=...`` finds every family the queues have by then)."""
        if self._registry is None:
            if len(self.metrics) == 1:
                self._registry = self.metrics[0].registry
            else:
                self._registry = CollectorRegistry(auto_describe=True)
                self._registry.register(_Merged(self.metrics))
        return self._registry

    def unhealthy(self) -> str | None:
        """Why /healthz fails for the first queue that is unhealthy, naming it when there are
        several; None when all are healthy."""
        for metrics in self.metrics:
            problem = metrics.unhealthy()
            if problem is not None:
                return problem if len(self.metrics) == 1 else f"queue {metrics.queue}: {problem}"
        return None

    def is_ready(self) -> bool:
        """Every queue's consumer is ready."""
        return all(metrics.is_ready() for metrics in self.metrics)


class _Merged(Collector):
    """The families of several registries, each family once with the samples of all."""

    def __init__(self, metrics: list[Metrics]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        yield from _merged(metrics.registry.collect() for metrics in self._metrics)


def _merged(registries: Iterable[Iterable[Metric]]) -> Iterator[Metric]:
    families: dict[str, Metric] = {}
    for collected in registries:
        for family in collected:
            kept = families.get(family.name)
            if kept is None:
                kept = families[family.name] = Metric(family.name, family.documentation,
                                                      family.type, family.unit)
            kept.samples.extend(family.samples)
    return iter(families.values())
