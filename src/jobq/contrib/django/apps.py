"""The Django app: the ``JOBQ`` setting read and checked once, and the RabbitMQ publisher the
process enqueues with, opened on first use and closed when the process exits."""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from jobq.config import Settings, load_settings
from jobq.core.errors import ConfigError
from jobq.sync import SyncPublisher

KEYS = {"CONFIG", "APP", "DATABASE"}


@dataclass(frozen=True)
class JobqSettings:
    """``settings.JOBQ``: the jobq config file (None: the defaults and JOBQ_... variables),
    the app ``jobq_consume`` runs, and the Django database whose transactions jobs join."""

    config: str | None = None
    app: str | None = None
    database: str = "default"


def read(value: Any) -> JobqSettings:
    """``settings.JOBQ`` checked: ImproperlyConfigured naming an unknown key or a bad value."""
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"JOBQ must be a dict, not {type(value).__name__}")
    unknown = sorted(set(value) - KEYS)
    if unknown:
        raise ImproperlyConfigured(f"JOBQ: unknown key(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(sorted(KEYS))})")
    for key in ("CONFIG", "APP", "DATABASE"):
        if key in value and not isinstance(value[key], str):
            raise ImproperlyConfigured(f"JOBQ['{key}'] must be a string")
    return JobqSettings(value.get("CONFIG"), value.get("APP"), value.get("DATABASE", "default"))


class JobqConfig(AppConfig):
    """``jobq.contrib.django`` in INSTALLED_APPS."""

    name = "jobq.contrib.django"
    label = "jobq"
    verbose_name = "jobq"
    jobq = JobqSettings()
    _settings: Settings | None = None
    _publisher: SyncPublisher | None = None
    _lock: threading.Lock

    def ready(self) -> None:
        self.jobq = read(getattr(django_settings, "JOBQ", {}))
        self._lock = threading.Lock()

    def settings(self) -> Settings:
        """jobq's settings, loaded from ``JOBQ['CONFIG']`` on first use."""
        if self._settings is None:
            try:
                self._settings = load_settings(self.jobq.config)
            except ConfigError as exc:
                raise ImproperlyConfigured(f"JOBQ['CONFIG']: {exc}") from exc
        return self._settings

    def publisher(self) -> SyncPublisher:
        """The process's publisher (RabbitMQ), opened on first use; any thread may share it."""
        with self._lock:
            if self._publisher is None:
                self._publisher = SyncPublisher(self.settings()).open()
                atexit.register(self._publisher.close)
            return self._publisher


def jobq_config() -> JobqConfig:
    """The installed app; ImproperlyConfigured saying what to add when it is not."""
    try:
        config = apps.get_app_config("jobq")
    except LookupError as exc:
        raise ImproperlyConfigured('add "jobq.contrib.django" to INSTALLED_APPS') from exc
    if not isinstance(config, JobqConfig):
        raise ImproperlyConfigured(f"the app labelled 'jobq' is {config.name}, not jobq.contrib.django")
    return config
