"""Reading a consumer's /metrics, /healthz and /readyz in tests."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """Status and body of a GET (4xx/5xx included)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
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


class Running:
    """A started consumer: its stderr lines collected, its metrics address learned from them."""

    def __init__(self, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._port = threading.Event()
        self.port = 0
        threading.Thread(target=self._read, daemon=True).start()
        if not self._port.wait(timeout):
            self.proc.kill()
            raise AssertionError("the consumer never said where its metrics are:\n"
                                 + "".join(self.lines))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            found = re.search(r"metrics on [^:\s]+:(\d+)", line)
            if found and not self._port.is_set():
                self.port = int(found.group(1))
                self._port.set()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code (killed after ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Ask for every task's stack (jobq.observability.stacks) before the kill, and then, if it still
            # runs, every thread's (faulthandler, PYTHONFAULTHANDLER: its loop may be blocked):
            # the failure shows them.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGABRT)
                time.sleep(1.0)
            self.proc.kill()
            self.proc.wait()
            time.sleep(0.2)  # the reader thread takes the last lines
            raise AssertionError(f"the consumer outlived SIGTERM by {timeout}s:\n"
                                 + "".join(self.lines[-300:])) from None
