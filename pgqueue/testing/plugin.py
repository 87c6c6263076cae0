"""The pytest plugin (entry point ``pytest11``: loaded wherever pgqueue is installed).

Every fixture is named ``pgqueue_*`` and does nothing until a test asks for it, so the
plugin costs nothing in a suite that does not use it. See docs/guides/testing.md.

* ``pgqueue_dsn`` — a fresh database of this test alone, migrated (pgqueue's tables, and
  the project's own from ``pgqueue_setup_database``), dropped after the test;
* ``pgqueue_queue`` — the project's Queue (ini option ``pgqueue_app``, ``module:name``
  as for ``pgq worker -A``) pointed at ``pgqueue_dsn``;
* ``pgqueue_setup_database`` — override it (session scope) to create the project's own
  tables in the template every test database is cloned from;
* ``pgqueue_databases`` — the session's :class:`TestDatabases`.

Ini options: ``pgqueue_app``, ``pgqueue_schema`` (default ``pgqueue``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

# pgqueue itself (psycopg, SQLAlchemy, alembic) is imported by the fixtures, when a test
# asks for one: a plugin loaded into every pytest run must not slow the others' start.
if TYPE_CHECKING:
    from pgqueue.queue import Queue
    from pgqueue.testing.databases import TestDatabases


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("pgqueue_app", "the Queue the pgqueue_queue fixture points at each test's "
                  "database, as module:name (like pgq worker -A)", default="")
    parser.addini("pgqueue_schema", "the schema pgqueue's tables are migrated into in test "
                  "databases", default="pgqueue")


@pytest.fixture(scope="session")
def pgqueue_setup_database() -> Callable[[str], None] | None:
    """Override (session scope) to return ``setup(dsn)``, run once on the template after
    pgqueue's migrations: create the project's own tables there (alembic upgrade,
    ``metadata.create_all``, SQL). None: nothing more."""
    return None


@pytest.fixture(scope="session")
def pgqueue_databases(
    request: pytest.FixtureRequest, pgqueue_setup_database: Callable[[str], None] | None,
) -> Iterator[TestDatabases]:
    """The server (``PGQUEUE_TEST_DSN`` or an embedded one) and its migrated template."""
    from pgqueue.testing.databases import TestDatabases, database_server

    schema = str(request.config.getini("pgqueue_schema")) or "pgqueue"
    with database_server() as admin_dsn:
        databases = TestDatabases(admin_dsn, schema, setup=pgqueue_setup_database)
        try:
            yield databases
        finally:
            databases.close()


@pytest.fixture
def pgqueue_dsn(pgqueue_databases: TestDatabases) -> Iterator[str]:
    """DSN of a migrated database of this test alone, dropped when it ends."""
    name = pgqueue_databases.create()
    try:
        yield pgqueue_databases.dsn(name)
    finally:
        pgqueue_databases.drop(name)


def _app_queue(config: pytest.Config) -> Queue:
    from pgqueue.queue import Queue

    target = str(config.getini("pgqueue_app")).strip()
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise pytest.UsageError(
            f"pgqueue_app = {target!r}: the pgqueue_queue fixture needs the ini option "
            "pgqueue_app = module:name naming your Queue (e.g. myapp.tasks:q)")
    queue = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(queue, Queue):
        raise pytest.UsageError(f"pgqueue_app = {target!r} is not a pgqueue Queue "
                                f"(got {type(queue).__name__})")
    return queue


@pytest.fixture
def pgqueue_queue(request: pytest.FixtureRequest) -> Iterator[Queue]:
    """The ``pgqueue_app`` Queue, pointed at this test's database; its pools closed after."""
    queue = _app_queue(request.config)  # a bad option fails before any database is made
    queue.configure(dsn=request.getfixturevalue("pgqueue_dsn"))
    try:
        yield queue
    finally:
        queue.close()
