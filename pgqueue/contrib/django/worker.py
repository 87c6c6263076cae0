"""The Queue ``pgq worker`` runs Django tasks with::

    DJANGO_SETTINGS_MODULE=mysite.settings pgq worker -A pgqueue.contrib.django.worker

Importing this module sets Django up (``django.setup()``), imports every installed app's
``tasks`` module, and exposes ``queue``: the Queue of the backend
``PGQUEUE_DJANGO_BACKEND`` (default ``"default"``) of ``settings.TASKS``, on the same
database (or the backend's ``DSN``). ``--dsn`` still overrides the database.
"""

from __future__ import annotations

import os

import django

django.setup()

from pgqueue.contrib.django.backend import autodiscover, backend_for  # noqa: E402

autodiscover()

queue = backend_for(os.environ.get("PGQUEUE_DJANGO_BACKEND", "default")).queue
