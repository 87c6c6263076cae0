"""pgqueue's revisions run from the user's own alembic environment (the ``pgqueue`` branch).

Users who manage their schema with alembic add ``pgqueue.migrations:versions`` to their
``version_locations`` and upgrade ``pgqueue@head``. Their version table then records
pgqueue's revision; workers must accept that, and ``pgq migrate`` must not run the same
revision a second time.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config

from pgqueue.db import migrate as migrations
from pgqueue.errors import SchemaOutOfDate
from tests._database import as_url

USER_ENV = '''
from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
'''


def _user_alembic(tmp_path: Path, dsn: str) -> Config:
    script_dir = tmp_path / "alembic"
    (script_dir / "versions").mkdir(parents=True)
    (script_dir / "env.py").write_text(textwrap.dedent(USER_ENV))
    (script_dir / "script.py.mako").write_text("")
    config = Config()
    config.set_main_option("script_location", str(script_dir))
    config.set_main_option("path_separator", "space")
    config.set_main_option(
        "version_locations", f"{script_dir / 'versions'} pgqueue.migrations:versions"
    )
    url = "postgresql+psycopg://" + as_url(dsn).split("://", 1)[1]
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def test_revisions_applied_from_the_users_environment_satisfy_the_worker_check(
    tmp_path: Path, empty_dsn: str
) -> None:
    command.upgrade(_user_alembic(tmp_path, empty_dsn), "pgqueue@head")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        recorded = conn.execute("SELECT version_num FROM public.alembic_version").fetchall()
        assert [row[0] for row in recorded] == [migrations.head_revision()]
        assert migrations.current_revision(conn, "pgqueue") == migrations.head_revision()
        migrations.check_schema(conn, "pgqueue")  # raises if the worker would refuse


def test_pgq_migrate_after_the_users_environment_does_not_run_revisions_again(
    tmp_path: Path, empty_dsn: str
) -> None:
    command.upgrade(_user_alembic(tmp_path, empty_dsn), "pgqueue@head")
    migrations.upgrade(empty_dsn, "pgqueue")  # would fail with "relation jobs already exists"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        private = conn.execute("SELECT version_num FROM pgqueue.alembic_version").fetchall()
        assert [row[0] for row in private] == [migrations.head_revision()]


def test_an_unknown_newer_revision_is_accepted_and_an_older_state_is_not(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999_from_the_future'")
        migrations.check_schema(conn, "pgqueue")
        conn.execute("DELETE FROM pgqueue.alembic_version")
        conn.execute("DROP TABLE pgqueue.jobs CASCADE")
        with pytest.raises(SchemaOutOfDate, match="run pgq migrate"):
            migrations.check_schema(conn, "pgqueue")
