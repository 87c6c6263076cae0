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


def pytest_configure(config: pytest.Config) -> None:
    # Tests that start PostgreSQL servers of their own (a private server to restart or
    # cut off, a primary and its standby, a Patroni cluster) never touch the session's
    # server, so a run against PGQUEUE_TEST_DSN repeats them unchanged: CI's run on the
    # system server deselects them (-m "not own_server") and the embedded run keeps them.
    config.addinivalue_line(
        "markers", "own_server: starts its own PostgreSQL servers (ignores PGQUEUE_TEST_DSN)")


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("PGQUEUE_TEST_DSN"):
        where = "PGQUEUE_TEST_DSN (external server)"
    elif os.environ.get("PGQUEUE_TEST_BACKEND", "").lower() == "docker":
        where = "docker (testcontainers)"
    else:
        where = "embedded PostgreSQL (temporary, started on first use)"
    return f"pgqueue test database: {where}"
