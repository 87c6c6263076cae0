"""Shared test set-up: the database fixtures live in the ``tests._database`` plugin.

Fixtures available everywhere: ``database_server``, ``admin_dsn``/``server_dsn``,
``schema``, ``databases``, ``dsn``, ``empty_dsn``, ``conn`` (and ``aconn``, its async
twin); ``pgbouncer`` (a PgBouncer in transaction mode in front of the server, from
``tests._pgbouncer``). Polling helpers:
``from tests._polling import wait_until``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

pytest_plugins = ["tests._database", "tests._pgbouncer"]


# Property tests (tests/_strategies.py): no per-example deadline (the machine is shared
# and the database tests do real round trips); in CI the examples are derandomized so a
# run is reproducible. HYPOTHESIS_PROFILE=thorough tries twenty times as many.
settings.register_profile("default", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.register_profile("thorough", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("PGQUEUE_TEST_DSN"):
        where = "PGQUEUE_TEST_DSN (external server)"
    elif os.environ.get("PGQUEUE_TEST_BACKEND", "").lower() == "docker":
        where = "docker (testcontainers)"
    else:
        where = "embedded PostgreSQL (temporary, started on first use)"
    return f"pgqueue test database: {where}"
