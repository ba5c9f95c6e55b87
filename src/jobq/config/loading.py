"""Loading: YAML files (and the files they ``extends``), ``${VAR:default}``, ``JOBQ_...``
environment overrides and the checks, into one frozen ``Settings``."""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from jobq.config.rules import CONVERT, LISTS, RULES, SECRETS
from jobq.config.settings import Settings
from jobq.core.errors import ConfigError
from jobq.feeds.schedules import parse_schedules

ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widened to float)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=key, source=source)
        return _build(tp, value, key + ".", source)
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
        return [_coerce(v, item, f"{key}[{i}]", source) for i, v in enumerate(value)]
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


def _build(cls: Any, data: Mapping[str, Any], prefix: str, source: str) -> Any:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key (known here: {known})", key=key, source=source)
        convert = CONVERT.get(key)
        if convert is not None:
            try:
                value = convert(value)
            except ValueError as exc:
                raise ConfigError(str(exc), key=key, source=source) from None
        value = _coerce(value, hints[name], key, source)
        rule = RULES.get(key)
        if rule is not None and not rule[0](value):
            shown = "***" if key in SECRETS else repr(value)
            raise ConfigError(f"bad value {shown}: must be {rule[1]}", key=key, source=source)
        kwargs[name] = value
    return cls(**kwargs)


def _interpolate(value: Any, env: Mapping[str, str], key: str, source: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, env, f"{key}.{k}" if key else str(k), source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, key, source) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = ENV_RE.fullmatch(value)
    result = interpolate(value, env, key=key, source=source)
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


def _read_yaml(path: Path, env: Mapping[str, str], seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    source = str(path)
    if path.resolve() in seen:
        raise ConfigError("'extends' loops back to this file", key="extends", source=source)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", source=source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {str(exc).splitlines()[0]}", source=source) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping", source=source)
    data: dict[str, Any] = _interpolate(raw, env, "", source)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError("expected a file name", key="extends", source=source)
    base = _read_yaml(path.parent / parent, env, (*seen, path.resolve()))
    return _merge(base, data)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError("cannot set a key under a non-mapping", key=dotted)
    node[last] = value


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """``JOBQ_CONSUMER__CONCURRENCY=8`` -> ``{"consumer.concurrency": 8}``.

    Only names with a ``__`` section separator (and ``JOBQ_TRANSPORT``) are overrides; other
    ``JOBQ_*`` variables are left for ``${VAR}`` interpolation in the YAML files.
    """
    out: dict[str, Any] = {}
    for name, text in env.items():
        if name.startswith("JOBQ_") and ("__" in name or name == "JOBQ_TRANSPORT"):
            key = name[5:].lower().replace("__", ".")
            # A secret stays the text it is: a token of digits is no number, and is never shown.
            out[key] = text if key in SECRETS and key not in LISTS else parse_scalar(text)
    return out


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Load, merge and validate the configuration; raise ConfigError naming the bad key."""
    env = os.environ if env is None else env
    path = path or env.get("JOBQ_CONFIG")
    source = str(path) if path else "<defaults>"
    data: dict[str, Any] = _read_yaml(Path(path), env) if path else {}
    layers = ((_env_overrides(env), "environment"), (dict(overrides or {}), "command line"))
    for layer, layer_source in layers:
        for dotted, value in layer.items():
            if value is not None:
                try:
                    _set_dotted(data, dotted, value)
                except ConfigError as exc:
                    raise ConfigError(str(exc), source=layer_source) from exc
    settings: Settings = _build(Settings, data, "", source)
    parse_schedules(settings.schedules, source)
    pg = settings.postgres
    if pg.network_timeout and pg.network_timeout >= pg.lease:
        raise ConfigError(f"must be shorter than postgres.lease ({pg.lease:g}s), got "
                          f"{pg.network_timeout:g}: a heartbeat that waits longer than the lease "
                          "lets every job's lease expire", key="postgres.network_timeout",
                          source=source)
    if settings.rabbitmq.max_priority and settings.rabbitmq.queue_type != "classic":
        raise ConfigError("priorities need a classic work queue (rabbitmq.queue_type: classic): "
                          "quorum queues have no x-max-priority on RabbitMQ 3.10; or keep "
                          "prioritised jobs on PostgreSQL", key="rabbitmq.max_priority",
                          source=source)
    if settings.rabbitmq.ca_file and not all(u.startswith("amqps://")
                                             for u in settings.rabbitmq.urls or [settings.rabbitmq.url]):
        raise ConfigError("a CA file is only used with TLS: the url must be amqps://",
                          key="rabbitmq.ca_file", source=source)
    return dataclasses.replace(settings, source=source)
