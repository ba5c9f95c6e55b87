"""Configuration as data: YAML files into frozen dataclasses, validated once, errors naming the key.

Precedence, lowest first: dataclass defaults, the YAML file (and the files it ``extends``),
``JOBQ_<SECTION>__<KEY>`` environment variables, command-line flags.
Inside YAML, ``${VAR:default}`` is replaced from the environment.

- ``settings``: the sections as frozen dataclasses, with their defaults.
- ``loading``: ``load_settings``: files, ``${VAR}``, the environment, the checks.
- ``rules``: what a good value is, key by key.
- ``redaction``: passwords kept out of logs and errors.
"""

from __future__ import annotations

from jobq.config.loading import interpolate, load_settings, parse_scalar
from jobq.config.redaction import mask_passwords, redact
from jobq.config.settings import (
    ConnectConfig,
    ConsumerConfig,
    DashboardConfig,
    LimitsConfig,
    LogConfig,
    MetricsConfig,
    PostgresConfig,
    RabbitConfig,
    RetentionConfig,
    RetryConfig,
    Settings,
    TracingConfig,
)

__all__ = [
    "ConnectConfig", "ConsumerConfig", "DashboardConfig", "LimitsConfig", "LogConfig",
    "MetricsConfig", "PostgresConfig", "RabbitConfig", "RetentionConfig", "RetryConfig",
    "Settings", "TracingConfig", "interpolate", "load_settings", "mask_passwords", "parse_scalar",
    "redact",
]
