"""``manage.py jobq_consume``: the ``consumer`` command inside the Django project, its apps
loaded (the tasks can use the ORM), with ``JOBQ['CONFIG']`` and ``JOBQ['APP']`` as defaults."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from jobq.cli.main import consumer_main
from jobq.contrib.django.apps import jobq_config

DJANGO_OPTIONS = ("--settings", "--pythonpath")  # read by manage.py itself, before the command


class Command(BaseCommand):
    help = ("Run a jobq consumer with this project's settings: every option of `consumer` "
            "(`manage.py jobq_consume --help` lists them); --config and -A default to "
            "JOBQ['CONFIG'] and JOBQ['APP'].")

    def run_from_argv(self, argv: list[str]) -> None:
        """Every argument after the command's name is the consumer's, its --help included
        (Django's own --settings and --pythonpath, which manage.py has read, left out)."""
        given, rest = [], iter(argv[2:])
        for arg in rest:
            if arg in DJANGO_OPTIONS:
                next(rest, None)
            elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
                given.append(arg)
        sys.exit(self.consume(given))

    def handle(self, *args: Any, **options: Any) -> None:
        """From ``call_command("jobq_consume", "--once")``: the same."""
        code = self.consume(list(args))
        if code:
            raise CommandError(f"the consumer exited {code}", returncode=code)

    def consume(self, given: list[str]) -> int:
        """Run the consumer with ``given`` and the project's defaults; its exit code."""
        jobq = jobq_config().jobq
        defaults: list[str] = []
        if jobq.config and not {"--config", "-c"} & set(given):
            defaults += ["--config", jobq.config]
        if jobq.app and not {"-A", "--app", "-p", "--processor"} & set(given):
            defaults += ["-A", jobq.app]
        return consumer_main([*defaults, *given], prog="manage.py jobq_consume")
