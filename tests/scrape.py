"""Reading a consumer's /metrics, /healthz and /readyz in tests."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (4xx/5xx included)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by name and labels."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(base: str) -> Samples:
    """``base``/metrics, parsed."""
    status, body = get(f"{base}/metrics")
    assert status == 200, body
    return parse(body)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` whose labels include ``labels`` (None if absent)."""
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    assert len(found) <= 1, f"{name} {labels} is ambiguous: {found}"
    return found[0] if found else None


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
