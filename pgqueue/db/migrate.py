"""Running pgqueue's alembic migrations from code: upgrade, print SQL, check the version.

Alembic is configured here, in code, so users need no ``alembic.ini``. The revisions live in
the ``pgqueue.migrations`` package, installed with the wheel.
"""

from __future__ import annotations

import io
import threading
from importlib import resources
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql

from pgqueue.db.plans import Plan, Statement, run_async, run_sync
from pgqueue.errors import SchemaOutOfDate

SCHEMA_ATTRIBUTE = "pgqueue_schema"

# Alembic keeps its migration context in module globals: two commands running in threads
# of one process would overwrite each other's. Across processes the advisory lock taken
# in env.py serialises migrators; within a process this lock does.
_ALEMBIC_LOCK = threading.Lock()


def _alembic_config(schema: str, dsn: str | None = None) -> Config:
    location = resources.files("pgqueue.migrations")
    config = Config()
    config.set_main_option("script_location", str(location))
    config.set_main_option("path_separator", "os")
    if dsn is not None:
        config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    config.attributes[SCHEMA_ATTRIBUTE] = schema
    return config


def sqlalchemy_url(dsn: str) -> str:
    """A SQLAlchemy URL (psycopg 3 driver) for any libpq DSN form."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + dsn.split("://", 1)[1]
    # key=value strings: let psycopg parse them, SQLAlchemy passes them through untouched.
    from urllib.parse import quote

    return "postgresql+psycopg:///?" + "&".join(
        f"{key}={quote(str(value), safe='')}"
        for key, value in psycopg.conninfo.conninfo_to_dict(dsn).items()
    )


def head_revision() -> str:
    """The newest revision this code knows."""
    script = ScriptDirectory.from_config(_alembic_config("pgqueue"))
    head = script.get_current_head()
    assert head is not None
    return head


def upgrade(dsn: str, schema: str, revision: str = "head") -> None:
    """Bring the schema to ``revision``; a no-op when it is already there."""
    with _ALEMBIC_LOCK:
        command.upgrade(_alembic_config(schema, dsn), revision)


def downgrade(dsn: str, schema: str, revision: str) -> None:
    """Step the schema back to ``revision`` (``base`` removes every pgqueue object)."""
    with _ALEMBIC_LOCK:
        command.downgrade(_alembic_config(schema, dsn), revision)


def upgrade_sql(schema: str, revision: str = "head") -> str:
    """The SQL ``upgrade`` would run on an empty database, as text ready for psql."""
    config = _alembic_config(schema, "postgresql://")
    buffer = io.StringIO()
    config.output_buffer = buffer
    with _ALEMBIC_LOCK:
        command.upgrade(config, revision, sql=True)
    return buffer.getvalue()


def revision_plan(schema: str) -> Plan[str | None]:
    """The revision recorded in ``<schema>.alembic_version``, or None before any migration."""
    table = sql.Identifier(schema, "alembic_version").as_string()
    found = yield Statement(
        b"SELECT to_regclass(%(table)s) IS NOT NULL AS present", {"table": table}
    )
    if not found or not found["present"]:
        return None
    query = sql.SQL("SELECT version_num FROM {}.alembic_version").format(sql.Identifier(schema))
    row = yield Statement(query.as_string().encode())
    return None if row is None else str(row["version_num"])


def current_revision(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """The schema's recorded revision, read on ``conn``."""
    return run_sync(conn, revision_plan(schema))


def require_head(current: str | None, schema: str) -> None:
    """Raise :class:`SchemaOutOfDate` unless ``current`` is this code's head revision."""
    head = head_revision()
    if current != head:
        found = "no pgqueue schema" if current is None else f"revision {current}"
        raise SchemaOutOfDate(
            f"the database has {found} in schema {schema!r} but this pgqueue needs {head}: "
            "run pgq migrate"
        )


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Raise :class:`SchemaOutOfDate` unless the database is at this code's head revision."""
    require_head(current_revision(conn, schema), schema)


async def check_schema_async(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Async :func:`check_schema`."""
    require_head(await run_async(conn, revision_plan(schema)), schema)
