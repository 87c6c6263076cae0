"""Django's tasks framework (``django.tasks``, or the ``django-tasks`` backport) on pgqueue.

``TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.PgQueueBackend"}}``; jobs run
in ``pgq worker -A pgqueue.contrib.django.worker``. See docs/guides/django.md.
"""

from __future__ import annotations

from pgqueue.contrib.django.backend import PgQueueBackend

__all__ = ["PgQueueBackend"]
