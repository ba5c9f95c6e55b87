"""An operator's mistakes and an unreachable server, each met by the real CLI on the real servers.

Every case ends with ONE line on stderr starting with ``jobq:`` that names the key, server, role,
database, vhost or YAML line, and the exit code of cli/main.py's table: 2 for a mistake (at the
first answer: never retried, so no WARNING line), 3 for a server that cannot be reached (a
WARNING line per failed try before it). Never a traceback, never a password. The only other
lines allowed are the INFO "connected to" ones.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql

from tests.conftest import (
    PG_DSN,
    ROOT,
    cli_env,
    init_queue,
    need_service,
    run_cli,
    schema_env,
)

PG = ["--config", str(ROOT / "configs" / "postgres.yaml")]
RMQ = ["--config", str(ROOT / "configs" / "rabbitmq.yaml")]
SECRET = "s3cret-Pw"  # a password no line may show (PostgreSQL here trusts 127.0.0.1: ignored)
ATTEMPTS = 2  # connect.attempts: an unreachable server is tried twice, one WARNING between
CONNECTED = re.compile(r"^\S+ \S+ INFO +jobq(\.rabbitmq)?: connected to ")
RETRY = re.compile(r"^\S+ \S+ WARNING +jobq(\.rabbitmq)?: cannot reach (PostgreSQL|RabbitMQ) at "
                   r"\S+ \(attempt \d+/\d+\): .*; retrying in ")


@dataclass(frozen=True)
class Case:
    """One mistake (code 2) or unreachable server (code 3): the command, its JOBQ_* settings
    ({name} filled from the ``world`` fixture) and what its one line must say."""

    id: str
    argv: tuple[str, ...]
    env: dict[str, str]
    code: int
    says: tuple[str, ...]
    secret: str | None = SECRET


def pg(dsn: str, *says: str, code: int = 2, argv: tuple[str, ...] = ("jobq", "stats", *PG),
       **env: str) -> dict[str, object]:
    return {"argv": argv, "env": {"JOBQ_PG_DSN": dsn, **env}, "code": code, "says": says}


def amqp(url: str, *says: str, code: int = 2, argv: tuple[str, ...] = ("jobq", "stats", *RMQ),
         secret: str | None = SECRET, **env: str) -> dict[str, object]:
    return {"argv": argv, "env": {"JOBQ_AMQP_URL": url, **env}, "code": code, "says": says,
            "secret": secret}


def conf(name: str, *says: str, code: int = 2, command: str = "stats", **env: str
         ) -> dict[str, object]:
    return {"argv": ("jobq", command, "--config", "{dir}/" + name), "env": env, "code": code,
            "says": says}


LOCAL = f"postgres:{SECRET}@127.0.0.1"
CASES = [Case(id=key, **value) for key, value in {
    # --- the config: YAML, keys, values, files ---
    "yaml-syntax": conf("syntax.yaml", "syntax.yaml:3:1: not valid YAML", "flow sequence started "
                        "at line 2, column 11"),
    "yaml-tab": conf("tab.yaml", "tab.yaml:2:1: not valid YAML", "'\\t'"),
    "yaml-duplicate-key": conf("dup.yaml", "dup.yaml:4: queue: duplicate key (also at line 1)"),
    "yaml-duplicate-nested": conf("dupnested.yaml", "dupnested.yaml:5: consumer.concurrency: "
                                  "duplicate key (also at line 3)"),
    "yaml-unknown-key": conf("unknown.yaml", "unknown.yaml:3: consumer.concurency: unknown key"),
    "yaml-wrong-type": conf("type.yaml", "type.yaml:3: consumer.concurrency: expected int, got "
                            "str 'lots'"),
    "yaml-bad-log-level": conf("level.yaml", "level.yaml:3: log.level: must be one of"),
    "yaml-a-list": conf("list.yaml", "list.yaml:1: the top level must be a mapping"),
    "yaml-ca-file-missing": conf("ca.yaml", "ca.yaml:5: rabbitmq.ca_file: bad value",
                                 "/nonexistent/ca.pem"),
    "config-file-missing": conf("absent.yaml", "absent.yaml: cannot read config file"),
    "env-bad-int": {"argv": ("jobq", "stats", *PG), "env": {"JOBQ_CONSUMER__CONCURRENCY": "abc"},
                    "code": 2, "says": ("environment variable JOBQ_CONSUMER__CONCURRENCY: "
                                        "consumer.concurrency: expected int",)},
    "env-unknown-key": {"argv": ("consumer", *PG, "-p", "noop", "--once"),
                        "env": {"JOBQ_CONSUMER__NO_SUCH": "1"}, "code": 2,
                        "says": ("environment variable JOBQ_CONSUMER__NO_SUCH: "
                                 "consumer.no_such: unknown key",)},
    "env-bad-log-level": {"argv": ("producer", *RMQ, "--count", "1"),
                          "env": {"JOBQ_LOG__LEVEL": "loud"}, "code": 2,
                          "says": ("environment variable JOBQ_LOG__LEVEL: log.level",)},
    "dsn-not-postgres": pg(f"mysql://root:{SECRET}@127.0.0.1/test",
                           "postgres.yaml:5 (from JOBQ_PG_DSN): postgres.dsn: bad value ***"),
    # --- PostgreSQL: it answers, and refuses ---
    "pg-no-such-role": pg(f"postgresql://nosuchrole:{SECRET}@127.0.0.1:5432/test",
                          'role "nosuchrole" does not exist', "postgres.dsn"),
    "pg-no-such-database": pg(f"postgresql://{LOCAL}:5432/nosuchdb",
                              'database "nosuchdb" does not exist', "postgres.dsn"),
    "pg-role-cannot-log-in": pg(f"postgresql://{{nologin}}:{SECRET}@127.0.0.1:5432/test",
                                "is not permitted to log in", "{nologin}", "postgres.dsn"),
    "pg-port-not-a-number": pg(f"postgresql://{LOCAL}:abc/test", '"abc"', '"port"',
                               "postgres.dsn"),
    "pg-unknown-dsn-option": pg(f"postgresql://{LOCAL}/test?foo=bar",
                                'postgres.dsn cannot be used: invalid URI query parameter: "foo"'),
    "pg-bad-sslmode": pg(f"postgresql://{LOCAL}/test?sslmode=bogus", "sslmode", "postgres.dsn",
                         argv=("producer", *PG, "--count", "1")),
    "pg-unknown-server-option": pg(f"postgresql://{LOCAL}/test?options=-c%20no_such_guc%3D1",
                                   'unrecognized configuration parameter "no_such_guc"',
                                   "postgres.dsn", argv=("consumer", *PG, "-p", "noop", "--once")),
    "pg-port-of-rabbitmq": pg(f"postgresql://{LOCAL}:5672/test", "127.0.0.1:5672",
                              "not PostgreSQL", "postgres.dsn"),
    "pg-init-never-ran-stats": pg(PG_DSN, "postgres.schema", "'{absent}'", "database 'test'",
                                  "run `jobq init`", JOBQ_POSTGRES__SCHEMA="{absent}"),
    "pg-init-never-ran-dead": pg(PG_DSN, "postgres.schema", "run `jobq init`",
                                 argv=("jobq", "dead", "list", *PG),
                                 JOBQ_POSTGRES__SCHEMA="{absent}"),
    "pg-init-never-ran-consumer": pg(PG_DSN, "postgres.schema", "run `jobq init`",
                                     argv=("consumer", *PG, "-p", "noop", "--once"),
                                     JOBQ_POSTGRES__SCHEMA="{absent}"),
    "pg-init-never-ran-empty-config": conf("empty.yaml", "postgres.schema", "run `jobq init`",
                                           JOBQ_POSTGRES__DSN=PG_DSN,
                                           JOBQ_POSTGRES__SCHEMA="{absent}"),
    "pg-role-without-grants-stats": pg("postgresql://{nogrant}@127.0.0.1:5432/test",
                                       "role '{nogrant}'", "schema '{schema}'", "grant",
                                       JOBQ_POSTGRES__SCHEMA="{schema}"),
    "pg-role-without-grants-producer": pg("postgresql://{nogrant}@127.0.0.1:5432/test",
                                          "may not use schema '{schema}'", "postgres.dsn",
                                          argv=("producer", *PG, "--count", "1"),
                                          JOBQ_POSTGRES__SCHEMA="{schema}"),
    "pg-role-without-grants-init": pg("postgresql://{nogrant}@127.0.0.1:5432/test",
                                      "role '{nogrant}'", "permission denied",
                                      argv=("jobq", "init", *PG),
                                      JOBQ_POSTGRES__SCHEMA="{absent}"),
    # --- PostgreSQL: nothing answers ---
    "pg-port-closed": pg(f"postgresql://{LOCAL}:1/test", "cannot reach PostgreSQL at 127.0.0.1:1",
                         code=3),
    "pg-unknown-host": pg(f"postgresql://{LOCAL.split('@')[0]}@nosuchhost.invalid/test",
                          "cannot reach PostgreSQL at nosuchhost.invalid:5432", code=3,
                          argv=("consumer", *PG, "-p", "noop", "--once")),
    "pg-server-silent": pg(f"postgresql://{LOCAL}:{{silent}}/test",
                           "cannot reach PostgreSQL at 127.0.0.1:{silent}", "timeout", code=3),
    # --- RabbitMQ: it answers, and refuses ---
    "amqp-no-such-vhost": amqp("amqp://guest:guest@127.0.0.1:5672/nosuch", "vhost 'nosuch'",
                               "rabbitmq.url", secret=None),
    "amqp-no-such-vhost-consumer": amqp("amqp://guest:guest@127.0.0.1:5672/nosuch",
                                        "vhost 'nosuch'", "rabbitmq.url", secret=None,
                                        argv=("consumer", *RMQ, "-p", "noop", "--once")),
    "amqp-wrong-password": amqp(f"amqp://guest:{SECRET}@127.0.0.1:5672/",
                                "refused the login of user 'guest'", "rabbitmq.url",
                                argv=("producer", *RMQ, "--count", "1")),
    "amqp-port-not-a-number": amqp(f"amqp://guest:{SECRET}@127.0.0.1:abc/", "rabbitmq.url",
                                   "port"),
    "amqps-to-a-plain-port": amqp(f"amqps://guest:{SECRET}@127.0.0.1:5672/",
                                  "does not speak TLS", "rabbitmq.url"),
    "amqp-ca-file-not-pem": conf("notpem.yaml", "rabbitmq.ca_file", "cannot be used"),
    "amqp-init-never-ran": amqp("amqp://guest:guest@127.0.0.1:5672/", "queue",
                                "run `jobq init --transport=rabbitmq`", "'{absent}'", secret=None,
                                JOBQ_QUEUE="{absent}"),
    # --- RabbitMQ: nothing answers ---
    "amqp-port-closed": amqp(f"amqp://guest:{SECRET}@127.0.0.1:1/",
                             "cannot reach RabbitMQ at 127.0.0.1:1", "Connection refused", code=3),
    "amqp-unknown-host": amqp(f"amqp://guest:{SECRET}@nosuchhost.invalid/",
                              "cannot reach RabbitMQ at nosuchhost.invalid:5672", code=3,
                              argv=("producer", *RMQ, "--count", "1")),
    "amqp-port-of-postgres": amqp(f"amqp://guest:{SECRET}@127.0.0.1:5432/",
                                  "cannot reach RabbitMQ at 127.0.0.1:5432", code=3),
    "amqp-server-silent": amqp(f"amqp://guest:{SECRET}@127.0.0.1:{{silent}}/",
                               "cannot reach RabbitMQ at 127.0.0.1:{silent}", code=3),
}.items()]

FILES = {
    "syntax.yaml": "queue: a\nconsumer: [a, b\n",
    "tab.yaml": "queue: a\n\tconsumer: x\n",
    "dup.yaml": "queue: a\ntransport: postgres\n# the same key again\nqueue: b\n",
    "dupnested.yaml": "consumer:\n  buffer: 2\n  concurrency: 3\n  job_timeout: 30\n  concurrency: 4\n",
    "unknown.yaml": "extends: {root}/configs/postgres.yaml\nconsumer:\n  concurency: 3\n",
    "type.yaml": "extends: {root}/configs/postgres.yaml\nconsumer:\n  concurrency: lots\n",
    "level.yaml": "extends: {root}/configs/postgres.yaml\nlog:\n  level: loud\n",
    "list.yaml": "- queue: a\n- queue: b\n",
    "ca.yaml": "extends: {root}/configs/rabbitmq.yaml\nrabbitmq:\n"
               "  url: amqps://guest:guest@127.0.0.1:5671/\n\n  ca_file: /nonexistent/ca.pem\n",
    "notpem.yaml": "extends: {root}/configs/rabbitmq.yaml\nrabbitmq:\n"
                   "  url: amqps://guest:guest@127.0.0.1:5672/\n  ca_file: {dir}/notpem.pem\n",
    "notpem.pem": "not a certificate\n",
    "empty.yaml": "",
}


def execute(statement: sql.Composable) -> None:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """What the cases refer to: config files, an initialised schema and one that is not, a
    role with no grants and one that may not log in, and a port that accepts and never answers."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    need_service("RabbitMQ", "127.0.0.1", 5672)
    tag = uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("operator-errors")
    names = {"dir": str(folder), "root": str(ROOT), "schema": f"t_ops_{tag}",
             "absent": f"never_init_{tag}", "nogrant": f"jq_nogrant_{tag}",
             "nologin": f"jq_nologin_{tag}"}
    for name, text in FILES.items():
        (folder / name).write_text(text.format(**names))
    init_queue("postgres", "q", schema_env(names["schema"]))
    execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(names["nogrant"])))
    execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(names["nologin"])))
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)  # accepts (the kernel), says nothing
    try:
        yield {**names, "silent": str(silent.getsockname()[1])}
    finally:
        silent.close()
        execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names["schema"])))
        for role in ("nogrant", "nologin"):
            execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(names[role])))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_an_operator_error_is_one_line_and_the_right_exit_code(case: Case,
                                                               world: dict[str, str]) -> None:
    env = cli_env(JOBQ_CONNECT__ATTEMPTS=str(ATTEMPTS), JOBQ_CONNECT__TIMEOUT="1",
                  JOBQ_CONNECT__BACKOFF_BASE="0.05", JOBQ_CONNECT__BACKOFF_MAX="0.1",
                  **{key: value.format(**world) for key, value in case.env.items()})
    started = time.monotonic()
    result = run_cli(*[arg.format(**world) for arg in case.argv], env=env, timeout=60)
    took = time.monotonic() - started
    both = result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == case.code, result.stderr
    assert "Traceback" not in both
    if case.secret is not None:
        assert case.secret not in both
    assert lines and lines[-1].startswith("jobq: "), result.stderr
    for said in case.says:
        assert said.format(**world) in lines[-1], lines[-1]
    others = [line for line in lines[:-1] if not CONNECTED.match(line)]
    if case.code == 2:  # known at the first answer: not retried
        assert others == [], result.stderr
    else:
        assert len(others) == ATTEMPTS - 1 and all(RETRY.match(line) for line in others), \
            result.stderr
    assert took < 10, f"{took:.1f}s"
