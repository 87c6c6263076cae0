"""Running pgqueue's alembic migrations from code: upgrade, print SQL, check the version.

Alembic is configured here, in code, so users need no ``alembic.ini``. The revisions live in
the ``pgqueue.migrations`` package, installed with the wheel.
"""

from __future__ import annotations

import io
import logging
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql

from pgqueue.db.plans import Plan, Statement, run_async, run_sync
from pgqueue.errors import SchemaOutOfDate
from pgqueue.settings import validate_schema_name

SCHEMA_ATTRIBUTE = "pgqueue_schema"

logger = logging.getLogger("pgqueue.migrate")

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


@dataclass(frozen=True)
class MigrationResult:
    """What :func:`upgrade` did to one schema: its revision before and after."""

    schema: str
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        """True when a revision was applied."""
        return self.before != self.after

    def describe(self) -> str:
        """One sentence for people: created, upgraded (from → to), or already current."""
        if not self.changed:
            return f"Schema {self.schema!r} is already at revision {self.after}; nothing to do."
        if self.before is None:
            return f"Created schema {self.schema!r} at revision {self.after}."
        return f"Upgraded schema {self.schema!r} from revision {self.before} to {self.after}."


def upgrade(dsn: str, schema: str, revision: str = "head") -> MigrationResult:
    """Bring the schema to ``revision``; a no-op when it is already there.

    A schema already at the target is only read (its version table), never locked or
    altered, so a role without the CREATE privilege (a worker's) may run this on a
    current schema. If pgqueue's revisions were applied from the user's own alembic
    environment, the private version table is first stamped with the revision found
    there, so the two routes never run the same revision twice.
    """
    schema = validate_schema_name(schema)  # before any query uses it
    target = head_revision() if revision == "head" else revision
    with psycopg.connect(dsn, autocommit=True) as conn:
        private = run_sync(conn, _private_revision_plan(schema))
        current = current_revision(conn, schema) if private is None else private
    if private == target:
        return MigrationResult(schema, current, current)
    with _ALEMBIC_LOCK:
        config = _alembic_config(schema, dsn)
        if private is None and current is not None:
            command.stamp(config, current)
        if current != target:
            command.upgrade(config, revision)
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = run_sync(conn, _private_revision_plan(schema))
    return MigrationResult(schema, current, after)


def _private_revision_plan(schema: str) -> Plan[str | None]:
    table = sql.Identifier(schema, "alembic_version").as_string()
    found = yield Statement(
        b"SELECT to_regclass(%(table)s) IS NOT NULL AS present", {"table": table}
    )
    if not found or not found["present"]:
        return None
    query = sql.SQL("SELECT version_num FROM {}.alembic_version").format(sql.Identifier(schema))
    row = yield Statement(query.as_string().encode())
    return None if row is None else str(row["version_num"])


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


def _known_revisions() -> set[str]:
    script = ScriptDirectory.from_config(_alembic_config("pgqueue"))
    return {revision.revision for revision in script.walk_revisions()}


def revision_plan(schema: str) -> Plan[str | None]:
    """The pgqueue revision the database is at, or None before any migration.

    Normally recorded in ``<schema>.alembic_version``. A user who ran pgqueue's revisions
    from their own alembic environment has it in *their* version table instead (any
    ``alembic_version`` table, next to their own revisions): found there too, provided the
    schema's ``jobs`` table exists.
    """
    table = sql.Identifier(schema, "alembic_version").as_string()
    found = yield Statement(
        b"SELECT to_regclass(%(table)s) IS NOT NULL AS present", {"table": table}
    )
    if found and found["present"]:
        query = sql.SQL("SELECT version_num FROM {}.alembic_version").format(
            sql.Identifier(schema)
        )
        row = yield Statement(query.as_string().encode())
        if row is not None:
            return str(row["version_num"])
    jobs = yield Statement(
        b"SELECT to_regclass(%(table)s) IS NOT NULL AS present",
        {"table": sql.Identifier(schema, "jobs").as_string()},
    )
    if not jobs or not jobs["present"]:
        return None
    tables = yield Statement(
        b"SELECT table_schema FROM information_schema.tables "
        b"WHERE table_name = 'alembic_version' AND table_schema <> %(schema)s "
        b"ORDER BY table_schema",
        {"schema": schema},
        fetch="all",
    )
    known = _known_revisions()
    for other in tables:
        query = sql.SQL("SELECT version_num FROM {}.alembic_version").format(
            sql.Identifier(other["table_schema"])
        )
        rows = yield Statement(query.as_string().encode(), fetch="all")
        ours = [str(row["version_num"]) for row in rows if row["version_num"] in known]
        if ours:
            return ours[0]
    return None


def current_revision(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """The schema's recorded revision, read on ``conn``."""
    return run_sync(conn, revision_plan(schema))


def require_head(current: str | None, schema: str) -> None:
    """Raise :class:`SchemaOutOfDate` unless ``current`` is at least this code's head.

    A revision this code does not know is taken to be newer (a rolling deploy in which the
    migration ran before every worker was replaced): accepted with a warning.
    """
    head = head_revision()
    if current == head:
        return
    if current is not None and current not in _known_revisions():
        logger.warning("Schema %r is at revision %s, newer than this pgqueue (%s); "
                       "starting anyway.", schema, current, head)
        return
    raise SchemaOutOfDate(schema_problem(schema, current, head))


def schema_problem(schema: str, current: str | None, head: str) -> str:
    """The one-line SchemaOutOfDate message: what is there, what is needed, what to run."""
    if current is None:
        return (
            f"schema {schema!r} of this database has not been migrated for pgqueue (no "
            f"revision recorded; this version needs {head}): run pgq migrate"
        )
    return (
        f"the pgqueue tables in schema {schema!r} are at revision {current}, but this "
        f"version of pgqueue needs {head}: run pgq migrate to upgrade them"
    )


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Raise :class:`SchemaOutOfDate` unless the database is at this code's head revision."""
    require_head(current_revision(conn, schema), schema)


async def check_schema_async(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Async :func:`check_schema`."""
    require_head(await run_async(conn, revision_plan(schema)), schema)
