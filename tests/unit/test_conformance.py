"""Every transport, publisher and admin conforms to its Protocol, and what it counts is exported.

mypy checks the types (``container._conforming``); it lets a parameter's name differ, and a
caller passing it by keyword would then fail. This compares the signatures at run time.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from typing import Any

import pytest
from dependency_injector import providers

from jobq.config import ConnectConfig, load_settings
from jobq.core.port import Control, DeadLetters, Inspect, Publisher, Transport
from jobq.observability.metrics import TRANSPORT_COUNTERS
from jobq.transports.memory import MemoryPublisher, MemoryTransport
from jobq.transports.postgres.admin import PostgresAdmin
from jobq.transports.postgres.lease import PostgresTransport
from jobq.transports.postgres.publisher import PostgresPublisher
from jobq.transports.postgres.transaction import PgTransactionTransport
from jobq.transports.rabbitmq.admin import RabbitAdmin
from jobq.transports.rabbitmq.connect import RabbitLink
from jobq.transports.rabbitmq.consumer import RabbitTransport
from jobq.transports.rabbitmq.publisher import RabbitPublisher
from jobq.wiring.container import Container, get_admin, get_publisher, get_transport

IMPLEMENTATIONS: list[tuple[type, type]] = [
    (Transport, PostgresTransport), (Transport, PgTransactionTransport),
    (Transport, RabbitTransport), (Transport, MemoryTransport),
    (Publisher, PostgresPublisher), (Publisher, RabbitPublisher), (Publisher, MemoryPublisher),
    *((role, admin) for role in (Inspect, Control, DeadLetters)
      for admin in (PostgresAdmin, RabbitAdmin)),
]


def members(protocol: type) -> dict[str, Any]:
    """The Protocol's methods and properties, and its attributes (as None)."""
    found: dict[str, Any] = dict.fromkeys(inspect.get_annotations(protocol))
    found.update({name: value for name, value in vars(protocol).items()
                  if not name.startswith("_") and (callable(value) or isinstance(value, property))})
    return found


def awaited(function: Any) -> bool:
    """An ``async def``, or a plain one that hands back a coroutine (a hot path's own
    coroutine, not one wrapped around it): either way its caller awaits what it returns."""
    if inspect.iscoroutinefunction(function):
        return True
    returns = typing.get_type_hints(function).get("return")
    return typing.get_origin(returns) is collections.abc.Coroutine


def shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults (annotations are mypy's business)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(("protocol", "cls"), IMPLEMENTATIONS,
                         ids=[f"{c.__name__}-{p.__name__}" for p, c in IMPLEMENTATIONS])
def test_implementation_has_every_member_with_the_protocols_signature(protocol: type, cls: type
                                                                      ) -> None:
    for name, expected in members(protocol).items():
        got = inspect.getattr_static(cls, name, None)
        if expected is None or isinstance(expected, property):
            # An attribute or property: a class attribute or a property; instance attributes
            # set in __init__ would not be seen here, and no implementation uses them.
            assert got is not None, f"{cls.__name__} has no {name}"
            continue
        assert callable(got), f"{cls.__name__}.{name} is not a method"
        assert awaited(got) == inspect.iscoroutinefunction(expected), (
            f"{cls.__name__}.{name}: async in one, not in the other")
        assert shape(got) == shape(expected), f"{cls.__name__}.{name}{inspect.signature(got)}"


class FakePool:
    """Stands in for the psycopg pool: wiring only, nothing connects."""

    max_size = 10


def wired(transport: str, **overrides: Any) -> Container:
    """A container whose backend connection is a stand-in that never connects."""
    container = Container(settings=load_settings(None, {"transport": transport, **overrides},
                                                 env={}))
    container.pg_pool.override(providers.Object(FakePool()))
    container.rmq_link.override(providers.Object(
        RabbitLink("amqp://guest:guest@127.0.0.1:1/", ConnectConfig(), role="test")))
    return container


@pytest.mark.parametrize(("transport", "claim", "kind"), [
    ("postgres", "lease", PostgresTransport), ("postgres", "transaction", PgTransactionTransport),
    ("rabbitmq", "lease", RabbitTransport)])
async def test_the_typed_accessors_hand_out_the_configured_backend(transport: str, claim: str,
                                                                   kind: type) -> None:
    container = wired(transport, **{"postgres.claim": claim})
    got = await get_transport(container)
    assert isinstance(got, kind)
    publisher, admin = await get_publisher(container), await get_admin(container)
    assert type(publisher) is (PostgresPublisher if transport == "postgres" else RabbitPublisher)
    assert type(admin) is (PostgresAdmin if transport == "postgres" else RabbitAdmin)
    # Every counter the transport keeps has a name in the metrics (none is kept unexported).
    counters = got.health().counters
    assert set(counters) <= set(TRANSPORT_COUNTERS), counters
    assert all(isinstance(n, int) for n in counters.values())


async def test_every_exported_counter_is_kept_by_some_transport() -> None:
    kept: set[str] = set()
    for transport, claim in (("postgres", "lease"), ("postgres", "transaction"), ("rabbitmq", "lease")):
        kept |= set((await get_transport(wired(transport, **{"postgres.claim": claim}))).health().counters)
    assert kept == set(TRANSPORT_COUNTERS)
