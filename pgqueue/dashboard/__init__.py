"""The web dashboard: pages, a JSON API, ``/metrics`` and ``/healthz`` for one schema.

Needs the ``dashboard`` extra (``pip install 'pgqueue[dashboard]'``). ``pgq dashboard``
serves :func:`create_app`; an application can also mount it under its own ASGI server
(and its own authentication)::

    from pgqueue.dashboard import Access, create_app
    app = create_app(queue, Access(token="..."))
"""

from __future__ import annotations

from .app import create_app
from .security import Access, is_loopback

__all__ = ["Access", "create_app", "is_loopback"]
