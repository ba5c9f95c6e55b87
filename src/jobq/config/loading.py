"""Loading: YAML files (and the files they ``extends``), ``${VAR:default}``, ``JOBQ_...``
environment overrides and the checks, into one frozen ``Settings``."""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from jobq.config.rules import CONVERT, LISTS, RULES, SECRETS
from jobq.config.settings import Settings
from jobq.config.yamlfile import read_yaml
from jobq.core.errors import ConfigError
from jobq.feeds.schedules import parse_schedules

# Where a key's value was given (``file:line``, an environment variable, ...), for messages.
Where = Callable[[str], str]

ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, where: Where) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widened to float)."""
    source = where(key)
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=key, source=source)
        return _build(tp, value, key + ".", where)
    if origin is Literal:
        if value not in get_args(tp):
            choices = ", ".join(repr(c) for c in get_args(tp))
            raise ConfigError(f"must be one of {choices}, got {value!r}", key=key, source=source)
        return value
    if origin in (Union, types.UnionType):
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"expected a list, got {type(value).__name__}", key=key, source=source)
        (item,) = get_args(tp)
        return [_coerce(v, item, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=key, source=source)
        return dict(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (tp in (int, float) and isinstance(value, bool)) or not isinstance(value, tp):
        shown = "***" if key in SECRETS else repr(value)
        raise ConfigError(
            f"expected {_type_name(tp)}, got {type(value).__name__} {shown}", key=key, source=source
        )
    return value


def _build(cls: Any, data: Mapping[str, Any], prefix: str, where: Where) -> Any:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key (known here: {known})", key=key, source=where(key))
        convert = CONVERT.get(key)
        if convert is not None:
            try:
                value = convert(value)
            except ValueError as exc:
                raise ConfigError(str(exc), key=key, source=where(key)) from None
        value = _coerce(value, hints[name], key, where)
        rule = RULES.get(key)
        if rule is not None and not rule[0](value):
            shown = "***" if key in SECRETS else repr(value)
            raise ConfigError(f"bad value {shown}: must be {rule[1]}", key=key, source=where(key))
        kwargs[name] = value
    return cls(**kwargs)


def _interpolate(value: Any, env: Mapping[str, str], key: str, source: str,
                 where: dict[str, str]) -> Any:
    """``value`` with every ``${VAR}`` replaced; ``where[key]`` names the variables that gave
    it (an error about the value then points at the variable, not only at the file's line)."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env, f"{key}.{k}" if key else str(k), source, where)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, key, source, where) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = ENV_RE.fullmatch(value)
    result = interpolate(value, env, key=key, source=where.get(key, source))
    given = [name for name, _ in ENV_RE.findall(value) if name in env]
    if given and key in where and "(from " not in where[key]:  # once for a list's items
        where[key] += f" (from {', '.join(dict.fromkeys(given))})"
    # A value that is one ${...} takes the type its text spells: ${N:8} is an int.
    return parse_scalar(result) if whole else result


def interpolate(text: str, env: Mapping[str, str], *, key: str = "", source: str = "",
                shell_defaults: bool = False) -> str:
    """``text`` with each ``${VAR}`` and ``${VAR:default}`` replaced from ``env``.

    With ``shell_defaults`` (the compose file's syntax, for tools/stack), ``${VAR:-default}``
    means what it means to a shell: the default replaces an empty value too. Without it the
    ``-`` is part of the default, as it always was in jobq's YAML (``${N:-1}`` is -1).
    """

    def lookup(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if shell_defaults and default is not None and default.startswith("-"):
            return env.get(name) or default[1:]
        if name in env:
            return env[name]
        if default is None:
            raise ConfigError(f"environment variable {name} is not set and has no default",
                              key=key, source=source)
        return default

    return ENV_RE.sub(lookup, text)


def parse_scalar(text: str) -> Any:
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return parsed if isinstance(parsed, str | int | float | bool | list) else text


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path, env: Mapping[str, str], origins: dict[str, str],
               seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's settings merged over those of the file it ``extends``; ``origins`` gets the
    ``file:line`` of each key."""
    source = str(path)
    if path.resolve() in seen:
        raise ConfigError("'extends' loops back to this file", key="extends", source=source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", source=source) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None
    raw, lines = read_yaml(text, source)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"the top level must be a mapping of keys, not a {type(raw).__name__}",
                          source=f"{source}:1")
    where = {key: f"{source}:{line}" for key, line in lines.items()}
    data: dict[str, Any] = _interpolate(raw, env, "", source, where)
    parent = data.pop("extends", None)
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError("expected a file name", key="extends", source=where["extends"])
        base = _read_yaml(path.parent / parent, env, origins, (*seen, path.resolve()))
        data = _merge(base, data)
    origins.update(where)  # after the base's: this file's keys win
    return data


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError("cannot set a key under a non-mapping", key=dotted)
    node[last] = value


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """``JOBQ_CONSUMER__CONCURRENCY=8`` -> ``{"consumer.concurrency": (8, "JOBQ_CONSUMER__CONCURRENCY")}``.

    Only names with a ``__`` section separator (and ``JOBQ_TRANSPORT``) are overrides; other
    ``JOBQ_*`` variables are left for ``${VAR}`` interpolation in the YAML files.
    """
    out: dict[str, tuple[Any, str]] = {}
    for name, text in env.items():
        if name.startswith("JOBQ_") and ("__" in name or name == "JOBQ_TRANSPORT"):
            key = name[5:].lower().replace("__", ".")
            # A secret stays the text it is: a token of digits is no number, and is never shown.
            out[key] = (text if key in SECRETS and key not in LISTS else parse_scalar(text), name)
    return out


def _origin(origins: Mapping[str, str], default: str) -> Where:
    """Where ``key``'s value was given: ``file:line`` (of the key, or of the nearest section
    above it that was), an environment variable, the command line, else ``default``."""
    def where(key: str) -> str:
        probe = key
        while probe:
            if probe in origins:
                return origins[probe]
            probe = probe[:max(probe.rfind("."), probe.rfind("["), 0)]
        return default
    return where


def _override(data: dict[str, Any], origins: dict[str, str], dotted: str, value: Any,
              origin: str) -> None:
    try:
        _set_dotted(data, dotted, value)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=origin) from exc
    for key in [k for k in origins if k.startswith((f"{dotted}.", f"{dotted}["))]:
        del origins[key]  # replaced as a whole: no line of a file speaks for them now
    origins[dotted] = origin


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Load, merge and validate the configuration; raise ConfigError naming the bad key."""
    env = os.environ if env is None else env
    path = path or env.get("JOBQ_CONFIG")
    source = str(path) if path else "<defaults>"
    origins: dict[str, str] = {}
    data: dict[str, Any] = _read_yaml(Path(path), env, origins) if path else {}
    layers = [(_env_overrides(env), "environment variable "),
              ({key: (value, "") for key, value in (overrides or {}).items()}, "command line")]
    for layer, said in layers:
        for dotted, (value, name) in layer.items():
            if value is not None:
                _override(data, origins, dotted, value, said + name)
    where = _origin(origins, source)
    settings: Settings = _build(Settings, data, "", where)
    parse_schedules(settings.schedules, where("schedules"))
    pg = settings.postgres
    if pg.network_timeout and pg.network_timeout >= pg.lease:
        raise ConfigError(f"must be shorter than postgres.lease ({pg.lease:g}s), got "
                          f"{pg.network_timeout:g}: a heartbeat that waits longer than the lease "
                          "lets every job's lease expire", key="postgres.network_timeout",
                          source=where("postgres.network_timeout"))
    if settings.rabbitmq.max_priority and settings.rabbitmq.queue_type != "classic":
        raise ConfigError("priorities need a classic work queue (rabbitmq.queue_type: classic): "
                          "quorum queues have no x-max-priority on RabbitMQ 3.10; or keep "
                          "prioritised jobs on PostgreSQL", key="rabbitmq.max_priority",
                          source=where("rabbitmq.max_priority"))
    if settings.rabbitmq.ca_file and not all(u.startswith("amqps://")
                                             for u in settings.rabbitmq.urls or [settings.rabbitmq.url]):
        raise ConfigError("a CA file is only used with TLS: the url must be amqps://",
                          key="rabbitmq.ca_file", source=where("rabbitmq.ca_file"))
    return dataclasses.replace(settings, source=source)
