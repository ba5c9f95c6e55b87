"""The test project's settings: PostgreSQL through psycopg 3, jobq's app and a shop."""

from __future__ import annotations

import os

SECRET_KEY = "not-a-secret: tests only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["jobq.contrib.django", "tests.django_project.shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        # The consumer the tests start is told the test database's name (pytest-django's).
        "NAME": os.environ.get("DJANGO_DB_NAME", "jobq_django"),
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }
}
JOBQ = {"APP": "tests.django_project.shop.tasks:app"}
