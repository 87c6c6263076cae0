"""A minimal Django project for the django.tasks backend's tests (and guide).

The database: ``PGQUEUE_DJANGO_TEST_DSN`` (a libpq DSN; tests point it at their own
database), pgqueue's tables in it.
"""

from __future__ import annotations

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(os.environ.get("PGQUEUE_DJANGO_TEST_DSN", "dbname=shop"))

SECRET_KEY = "tests-only"
USE_TZ = True
# Django 6.0 and later have django.tasks and need no app for it; before 6.0 the
# django-tasks backport is the API, and an app (CI tests both: see docs/guides/django.md).
_BACKPORT = importlib.util.find_spec("django.tasks") is None
INSTALLED_APPS = [
    *(["django_tasks"] if _BACKPORT else []),
    "pgqueue.contrib.django",  # manage.py migrate creates pgqueue's tables
    "tests.integration.django_project.shop",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.get("dbname", ""),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.PgQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 2, "TIMEOUT": 60, "RETRY_INTERVALS": [60, 600]},
    },
}
