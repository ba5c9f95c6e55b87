"""Before any case: does each backend the chosen targets need answer?

Said at once, naming the address (never a password) and how to start the server, so that a
first run against a stopped server does not spend half a minute per case printing
``0 jobs/s, lost None, failed``. The targets of a backend that answers still run; the
command then exits non-zero naming what it skipped.
"""

from __future__ import annotations

import asyncio

import psycopg

from benchmarks.spaces import Servers
from jobq.transports.common import error_text
from jobq.transports.postgres.connect import server_address as pg_address
from jobq.transports.rabbitmq.connect import server_address as amqp_address

TIMEOUT = 3.0  # seconds a server gets to answer the check
COMPOSE = "docker compose -f compose/docker-compose.yml up -d"
HOW_TO_START = {
    "postgres": "start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) "
                f"main start` (root), or the compose stack's: `{COMPOSE} postgres`",
    "rabbitmq": f"start it with `rabbitmq-server -detached` (root), or the compose stack's: "
                f"`{COMPOSE} rabbitmq`",
}


def postgres_problem(dsn: str) -> str | None:
    """Why PostgreSQL at ``dsn`` does not answer, or None."""
    try:
        with psycopg.connect(dsn, connect_timeout=round(TIMEOUT), autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_address(dsn)} does not answer ({error_text(exc)})"
    return None


def rabbitmq_problem(url: str) -> str | None:
    """Why RabbitMQ at ``url`` does not answer, or None."""
    async def connect() -> None:
        import aio_pika

        connection = await aio_pika.connect(url, timeout=TIMEOUT)
        await connection.close()

    try:
        asyncio.run(connect())
    except Exception as exc:  # whatever the client raises: the check says it, the run goes on
        return f"RabbitMQ at {amqp_address(url)} does not answer ({error_text(exc)})"
    return None


def unreachable(servers: Servers, backends: set[str]) -> dict[str, str]:
    """Backend -> what is wrong and how to start it, for each of ``backends`` that fails."""
    checks = {"postgres": lambda: postgres_problem(servers.pg_dsn),
              "rabbitmq": lambda: rabbitmq_problem(servers.amqp_url)}
    out = {}
    for backend in sorted(backends):
        problem = checks[backend]()
        if problem is not None:
            out[backend] = f"{problem}: {HOW_TO_START[backend]}"
    return out
