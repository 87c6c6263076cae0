"""Helpers for testing code that uses pgqueue, against a real PostgreSQL database.

``drain(q)`` runs the ready jobs with the real worker and returns each :class:`Attempt`;
``drain(q, now=...)`` first makes the jobs due by then ready. ``assert_enqueued`` and
``assert_not_enqueued`` read what waits in the queue. The pytest plugin
(``pgqueue.testing.plugin``, loaded by its entry point) gives each test a migrated
database. Nothing here fakes the database: docs/guides/testing.md.
"""

from __future__ import annotations

from pgqueue.testing.assertions import assert_enqueued, assert_not_enqueued
from pgqueue.testing.databases import TestDatabases
from pgqueue.testing.drain import Attempt, AttemptOutcome, drain, drain_async

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "TestDatabases",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "drain_async",
]
