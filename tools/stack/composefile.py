"""Reads compose/docker-compose.yml the way the native stack and the tests need it.

The compose file is the one description of the demo stack: ``make stack`` runs the same
``jobq``/``producer``/``consumer`` commands natively, and the tests check them with the real
CLI parsers. Commands are either an exec list or a small ``sh -ec`` script made of simple
commands separated by newlines, ``&`` (background), ``&&``/``;`` (foreground) and ``wait``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobq import config
from jobq.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
PROMETHEUS = ROOT / "compose" / "prometheus" / "prometheus.yml"
PROGRAMS = ("consumer", "producer", "jobq")
_BARE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")  # $VAR without braces: not read here
_SEPARATORS = {"&": True, "&&": False, ";": False}  # separator -> runs in the background


@dataclass(frozen=True)
class Step:
    """One step of a service's command: run ``argv`` (in the background or not), or wait."""

    argv: tuple[str, ...] = ()
    background: bool = False

    @property
    def is_wait(self) -> bool:
        """True for the shell's ``wait``: every background step must finish first."""
        return self.argv == ("wait",)


def load(path: Path = COMPOSE) -> dict[str, Any]:
    """The compose file as data (YAML anchors and merge keys resolved)."""
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution as far as the stack's files use it: ``${VAR}``,
    ``${VAR:-default}`` (jobq.config's interpolation, shell defaults) and ``$$`` for ``$``."""
    parts = text.split("$$")
    for part in parts:
        if (bare := _BARE.search(part)) is not None:
            raise ValueError(f"write {bare.group(0)} as ${{{bare.group(0)[1:]}}} in: {text}")
    return "$".join(config.interpolate(part, env, key="environment", source=str(COMPOSE),
                                       shell_defaults=True) for part in parts)


def service_env(service: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A service's ``environment`` (mapping or list form), variables substituted."""
    env = os.environ if env is None else env
    raw = service.get("environment") or {}
    pairs = raw.items() if isinstance(raw, Mapping) else (item.partition("=")[::2] for item in raw)
    return {str(k): interpolate(str(v), env) for k, v in pairs}


def split_script(script: str) -> list[Step]:
    """The simple commands of a ``sh -ec`` script, in order, with their background flag."""
    steps: list[Step] = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token in _SEPARATORS:
                if words and words != ["set", "-e"]:
                    steps.append(Step(tuple(words), _SEPARATORS[token]))
                words = []
            elif token in ("|", "||", "(", ")", "<", ">", ">>"):
                raise ValueError(f"unsupported shell syntax {token!r} in: {line}")
            else:
                words.append(token)
    return steps


def service_steps(service: Mapping[str, Any]) -> list[Step]:
    """What a service runs: its ``sh -c`` script split into steps, or its one command."""
    entry = service.get("entrypoint") or []
    command = service.get("command") or []
    if isinstance(entry, str):
        entry = shlex.split(entry)
    if isinstance(command, str):
        command = shlex.split(command)
    if entry and entry[0] in ("sh", "/bin/sh", "bash") and entry[-1].startswith("-") \
            and "c" in entry[-1]:
        return [step for part in command for step in split_script(part)]
    return [Step(tuple([*entry, *command]))]


def jobq_commands(service: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Every consumer/producer/jobq command a service runs (``wait`` left out)."""
    return [s.argv for s in service_steps(service) if not s.is_wait]


def parse(argv: tuple[str, ...] | list[str]) -> argparse.Namespace:
    """``argv`` parsed by the real parser of its program; SystemExit (code 2) when invalid."""
    parsers = {"consumer": cli.consumer_parser, "producer": cli.producer_parser,
               "jobq": cli.admin_parser}
    if not argv or argv[0] not in parsers:
        raise ValueError(f"not a jobq program: {' '.join(argv)!r} (expected one of {PROGRAMS})")
    return parsers[argv[0]]().parse_args(list(argv[1:]))


def prometheus_config(path: Path = PROMETHEUS) -> dict[str, Any]:
    """The stack's Prometheus config as data."""
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def native_prometheus_config(targets: Mapping[str, list[str]], interval: str = "1s"
                             ) -> dict[str, Any]:
    """The compose Prometheus config with each job's DNS discovery replaced by ``targets``
    (job name -> host:port list); jobs with no target are left out."""
    config = prometheus_config()
    config["global"] = {**config.get("global", {}), "scrape_interval": interval,
                        "evaluation_interval": interval}
    jobs = []
    for job in config["scrape_configs"]:
        if targets.get(job["job_name"]):
            job = {k: v for k, v in job.items() if not k.endswith("_sd_configs")}
            job["static_configs"] = [{"targets": list(targets[job["job_name"]])}]
            jobs.append(job)
    config["scrape_configs"] = jobs
    return config
