"""The Django app ``pgqueue.contrib.django``: in INSTALLED_APPS, ``manage.py migrate``
creates pgqueue's tables (its migration runs pgqueue's own), in every database a
PgQueueBackend of ``settings.TASKS`` enqueues through — test databases included."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
