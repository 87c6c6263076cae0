"""Alembic environment for pgqueue's own migrations.

pgqueue configures alembic in code (see ``pgqueue.db.migrate``): no ``alembic.ini``. The
version table is private to the schema (``<schema>.alembic_version``) so that pgqueue's
history never mixes with the application's. Users who run pgqueue's revisions from their
own alembic environment add ``pgqueue.migrations:versions`` to ``version_locations`` and
upgrade the ``pgqueue@head`` branch.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

from pgqueue.db.names import advisory_lock_key
from pgqueue.migrations._ddl import CREATE_SCHEMA, render, schema_name

VERSION_TABLE = "alembic_version"

config = context.config
schema = schema_name()


def run_offline() -> None:
    """Emit SQL: what ``pgq migrate --sql`` prints."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url") or "postgresql://",
        dialect_name="postgresql",
        literal_binds=True,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.execute(render(CREATE_SCHEMA, schema))
        context.run_migrations()


def run_online() -> None:
    """Migrate a live database under an advisory lock, so concurrent migrators queue up."""
    connection = config.attributes.get("connection")
    if connection is None:
        url = str(config.get_main_option("sqlalchemy.url"))
        engine = create_engine(url, poolclass=pool.NullPool)
        with engine.connect() as connection:
            _migrate(connection)
    else:
        _migrate(connection)


def _migrate(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        version_table=VERSION_TABLE,
        version_table_schema=schema,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        lock = advisory_lock_key(schema, "migrate")
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock})  # type: ignore[attr-defined]
        connection.execute(text(render(CREATE_SCHEMA, schema)))  # type: ignore[attr-defined]
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
