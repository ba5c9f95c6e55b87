"""Finding every queue: which of the broker's queues are jobq's, where the management API is
(never showing the password), and the dashboard adding a Source once per queue found, with a
backend that cannot list shown as a problem until it can again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobq.config import RabbitConfig
from jobq.core.errors import ConnectionLost
from jobq.dashboard import discovery
from jobq.dashboard.discovery import Discovery
from jobq.dashboard.sources import RETRY_AFTER, Source
from jobq.transports.rabbitmq.management import Management, jobq_queue_names


def jobq_topology(q: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the API lists for a queue ``jobq init`` declared (classic work queue, one tier)."""
    queues = [{"name": q, "arguments": {"x-queue-type": "quorum", "x-dead-letter-exchange": f"{q}.dlx"}},
              {"name": f"{q}.alone", "arguments": {"x-dead-letter-exchange": f"{q}.dlx"}},
              {"name": f"{q}.dead", "arguments": {"x-queue-type": "classic"}},
              {"name": f"{q}.retry.5", "arguments": {"x-message-ttl": 5000,
                                                     "x-dead-letter-exchange": "jobq",
                                                     "x-dead-letter-routing-key": q}},
              {"name": f"{q}.paused", "arguments": {}}]
    bindings = [{"destination": q, "destination_type": "queue", "routing_key": q}]
    return queues, bindings


def test_only_the_work_queues_jobq_declared_on_the_exchange_are_jobqs() -> None:
    mail_queues, mail_bindings = jobq_topology("mail")
    web_queues, web_bindings = jobq_topology("web")
    queues = [*web_queues, *mail_queues,
              # another application's queue, bound to the same exchange by its name
              {"name": "billing", "arguments": {}},
              # shaped like jobq's, not bound to this exchange (another exchange's jobq queue)
              {"name": "other", "arguments": {"x-dead-letter-exchange": "other.dlx"}},
              # bound under another routing key
              {"name": "odd", "arguments": {"x-dead-letter-exchange": "odd.dlx"}}]
    bindings = [*web_bindings, *mail_bindings,
                {"destination": "billing", "destination_type": "queue", "routing_key": "billing"},
                {"destination": "odd", "destination_type": "queue", "routing_key": "even"},
                {"destination": "x", "destination_type": "exchange", "routing_key": "x"}]
    assert jobq_queue_names(queues, bindings) == ["mail", "web"]
    assert jobq_queue_names([{"name": "q"}], []) == []  # no arguments at all


@pytest.mark.parametrize(("url", "api", "base", "vhost", "user"), [
    ("amqp://guest:guest@127.0.0.1:5672/", "", "http://127.0.0.1:15672/", "/", "guest"),
    ("amqps://app:s3cret@mq.example.com/prod%2Fjobs", "", "https://mq.example.com:15671/",
     "prod/jobs", "app"),
    ("amqp://app:s3cret@[::1]:5672/v", "", "http://[::1]:15672/", "v", "app"),
    ("amqp://app:s3cret@mq:5672/", "https://admin:other@mgmt.example.com:8443/rabbit/",
     "https://mgmt.example.com:8443/rabbit/", "/", "admin"),
    ("amqp://app:s3cret@mq:5672/", "http://mgmt:15672", "http://mgmt:15672/", "/", "app"),
])
def test_where_the_management_api_is_and_who_asks_it(url: str, api: str, base: str, vhost: str,
                                                     user: str) -> None:
    found = Management.configured(RabbitConfig(url=url), api)
    assert (found.base, found.vhost, found.user) == (base, vhost, user)
    assert "s3cret" not in repr(found) and "other" not in repr(found)


async def test_an_api_that_does_not_answer_is_an_error_naming_the_fix() -> None:
    management = Management.configured(RabbitConfig(url="amqp://app:s3cret@127.0.0.1:1/"))
    with pytest.raises(Exception, match="rabbitmq_management plugin") as caught:
        await management.jobq_queues("jobq")
    assert "s3cret" not in str(caught.value)


class Lister:
    """An Admin that only lists its backend's queues (or fails to)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.down = False
        self.asked = 0

    async def queues(self) -> list[str]:
        self.asked += 1
        if self.down:
            raise ConnectionLost("PostgreSQL at 127.0.0.1:1 refused the connection")
        return list(self.names)


def source(queue: str, admin: Lister, home: str = "pg#jobq") -> Source:
    @contextlib.asynccontextmanager
    async def opener() -> AsyncIterator[Any]:
        yield admin

    return Source(name=f"postgres/{queue}", transport="postgres", queue=queue,
                  address="127.0.0.1:5432", opener=opener, home=home)


async def test_each_queue_found_joins_the_list_once_and_a_backend_down_is_a_problem(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(discovery.time, "monotonic", lambda: clock[0])
    admin, elsewhere = Lister(["a", "b", "default"]), Lister(["c"])
    # Two configured queues on one backend (asked once), one on another schema.
    sources = [source("default", admin), source("a", admin), source("c", elsewhere, "pg#other")]
    made: list[tuple[str, str]] = []

    def make(asked: Source, queue: str) -> Source:
        made.append((asked.queue, queue))
        return source(queue, admin, asked.home)

    found = Discovery(sources, make)
    await found.find()
    assert [s.queue for s in sources] == ["default", "a", "c", "b"]
    assert made == [("default", "b")] and admin.asked == 1 and elsewhere.asked == 1

    admin.names.append("d")
    await found.find()  # asked again too soon: nothing asked
    assert admin.asked == 1
    clock[0] += discovery.FIND_EVERY
    await found.find()
    assert [s.queue for s in sources] == ["default", "a", "c", "b", "d"]  # appended: pages keep their numbers

    admin.down = True
    clock[0] += discovery.FIND_EVERY
    await found.find()
    assert "refused" in found.problems["postgres/default"]
    assert len(sources) == 5  # what was found stays listed
    admin.down = False
    clock[0] += RETRY_AFTER  # the source tries its backend again (and discovery asks again)
    await found.find()
    assert found.problems == {}
