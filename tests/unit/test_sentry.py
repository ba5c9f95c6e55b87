"""The Sentry failure hook, against sentry-sdk's own client and a Transport that keeps the
envelopes it is given in memory (what the SDK would send)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import jobq
import jobq.testing
from jobq.tasks.sentry import sentry_hook


class KeptTransport(Transport):
    """Keeps every envelope instead of sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def events(self) -> list[dict[str, Any]]:
        return [event for envelope in self.envelopes
                if (event := envelope.get_event()) is not None]


@pytest.fixture
def sentry() -> Iterator[KeptTransport]:
    transport = KeptTransport()
    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=transport,
                    default_integrations=False)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init()  # an inactive client again for the tests after


@dataclass
class Invoice:
    number: int


@pytest.mark.parametrize("final_only", [False, True])
async def test_a_failing_tasks_exception_reaches_sentry_with_the_jobs_tags(
        sentry: KeptTransport, final_only: bool) -> None:
    app = jobq.App()
    app.on_failure(sentry_hook(final_only=final_only))

    @app.task(retries=1)
    async def bill(args: Invoice, ctx: jobq.Context) -> None:
        raise LookupError(f"no invoice {args.number}")

    async with jobq.testing.worker(app) as worker:
        await bill.enqueue(Invoice(9))
        await worker.drain(raise_errors=False)
    sentry_sdk.flush()
    events = sentry.events()
    assert [e["tags"]["jobq.outcome"] for e in events] == (["dead"] if final_only
                                                             else ["retried", "dead"])
    last = events[-1]
    assert last["tags"]["jobq.kind"] == "bill"
    (exception,) = last["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("LookupError", "no invoice 9")
    frames = exception["stacktrace"]["frames"]
    assert frames[-1]["function"] == "bill"  # the handler's own traceback
    context = last["contexts"]["jobq"]
    assert (context["attempt"], context["max_attempts"]) == (2, 2)
    assert context["reason"] == "LookupError: no invoice 9 (gave up after 2 of 2 attempts)"
