"""The broker's jobq queues, from the RabbitMQ management plugin's HTTP API.

AMQP 0-9-1 has no way to list queues; the management API has (RabbitMQ's own web UI and
Celery's Flower read it). A jobq queue is one that ``jobq init`` declared: bound to the
configured exchange under its own name, and dead-lettering to ``<q>.dlx``. Its ``.alone``,
``.dead``, ``.paused``, ``.cancelled`` and retry tier queues are not jobq queues of their own.

Two GETs (the vhost's queues, the exchange's bindings), each with a deadline; the password
never appears in an error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from jobq.config import RabbitConfig
from jobq.core.errors import TransportError
from jobq.core.within import within

TIMEOUT = 5.0  # seconds each GET may take
PORTS = {"http": 15672, "https": 15671}  # the plugin's defaults


@dataclass(frozen=True)
class Management:
    """Where the management API is, and who asks it."""

    base: str  # scheme://host:port/ (no user, no password: shown in messages)
    vhost: str
    user: str
    password: str = field(repr=False)
    ca_file: str = ""

    @classmethod
    def configured(cls, settings: RabbitConfig, api: str = "") -> Management:
        """``api`` (``dashboard.rabbitmq_api``), else the AMQP url's host on the plugin's port;
        the user and password of ``api``, else of the AMQP url; the AMQP url's vhost."""
        amqp = urlsplit((settings.urls or [settings.url])[0])
        vhost = unquote(amqp.path[1:]) if len(amqp.path) > 1 else "/"
        if api:
            given = urlsplit(api)
            scheme, host, port = given.scheme, given.hostname or "localhost", given.port
            path = given.path.rstrip("/")
            user, password = given.username or amqp.username, given.password or amqp.password
        else:
            scheme = "https" if amqp.scheme == "amqps" else "http"
            host, port, path = amqp.hostname or "localhost", None, ""
            user, password = amqp.username, amqp.password
        shown = f"[{host}]" if ":" in host else host
        base = f"{scheme}://{shown}:{port or PORTS.get(scheme, 15672)}{path}/"
        return cls(base=base, vhost=vhost, user=unquote(user or "guest"),
                   password=unquote(password or "guest"), ca_file=settings.ca_file)

    async def jobq_queues(self, exchange: str) -> list[str]:
        """The vhost's jobq queues on ``exchange``, sorted; TransportError when the API does
        not answer, or refuses."""
        vhost = quote(self.vhost, safe="")
        queues = await self._get(f"api/queues/{vhost}?columns=name,arguments")
        bindings = await self._get(f"api/exchanges/{vhost}/{quote(exchange, safe='')}"
                                   "/bindings/source", missing=[])
        return jobq_queue_names(queues, bindings)

    async def _get(self, path: str, missing: Any = None) -> Any:
        """The JSON at ``path``; ``missing`` for a 404 when given (an exchange never declared)."""
        try:
            return await within(asyncio.to_thread(self._get_now, path), TIMEOUT + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing is not None:
                return missing
            why = ("refused the user " + repr(self.user) if exc.code in (401, 403) else
                   f"answered {exc.code} {exc.reason}")
            raise TransportError(f"the RabbitMQ management API at {self.base} {why}") from exc
        except (OSError, TimeoutError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc or "no answer"
            raise TransportError(
                f"no RabbitMQ management API at {self.base} ({reason}): enable the "
                "rabbitmq_management plugin, or set dashboard.rabbitmq_api") from exc

    def _get_now(self, path: str) -> Any:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(self.base + path,
                                         headers={"Authorization": f"Basic {token}"})
        context = (ssl.create_default_context(cafile=self.ca_file or None)
                   if self.base.startswith("https:") else None)
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as answer:
            return json.loads(answer.read())


def jobq_queue_names(queues: Sequence[Mapping[str, Any]],
                     bindings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names among ``queues`` (the API's queue objects) with jobq's topology: bound by
    their own name in ``bindings`` (the exchange's) and dead-lettering to ``<name>.dlx``."""
    bound = {b.get("destination") for b in bindings
             if b.get("destination_type") == "queue" and b.get("routing_key") == b.get("destination")}
    return sorted(str(q["name"]) for q in queues
                  if q.get("name") in bound
                  and (q.get("arguments") or {}).get("x-dead-letter-exchange") == f"{q['name']}.dlx")
