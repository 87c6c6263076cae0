"""pgqueue's alembic migrations: idempotent, reversible, printable, schema-agnostic, safe
to run concurrently, and recognised by the schema check that workers run at start-up."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql

from pgqueue.db.migrate import (
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
    upgrade_sql,
)
from pgqueue.errors import ConfigurationError, SchemaOutOfDate
from pgqueue.settings import validate_schema_name
from tests._database import DatabaseFactory, as_url, find_psql
from tests._polling import wait_until
from tests._snapshot import schema_snapshot


def _snapshot(dsn: str, schema: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return schema_snapshot(conn, schema)


def _schema_objects(dsn: str, schema: str) -> list[str]:
    """Every relation, function, trigger and type in ``schema``, as sorted labels."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT 'relation ' || c.relname || ' (' || c.relkind::text || ')'
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %(schema)s
            UNION ALL
            SELECT 'function ' || p.proname
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = %(schema)s
            UNION ALL
            SELECT 'trigger ' || t.tgname
              FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
            UNION ALL
            SELECT 'type ' || t.typname
              FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE n.nspname = %(schema)s AND t.typtype IN ('e', 'd', 'c', 'r')
               AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = t.typrelid)
            ORDER BY 1
            """,
            {"schema": schema},
        ).fetchall()
    return [str(row[0]) for row in rows]


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname !~ '^(pg_|information_schema)'"
        ).fetchall()
    return {str(row[0]) for row in rows}


def test_upgrade_is_idempotent(empty_dsn: str) -> None:
    upgrade(empty_dsn, "pgqueue")
    first = _snapshot(empty_dsn, "pgqueue")
    upgrade(empty_dsn, "pgqueue")
    assert _snapshot(empty_dsn, "pgqueue") == first
    with psycopg.connect(empty_dsn) as conn:
        assert current_revision(conn, "pgqueue") == head_revision()
        versions = conn.execute("SELECT count(*) FROM pgqueue.alembic_version").fetchone()
    assert versions == (1,)


def test_upgrade_of_a_database_with_jobs_keeps_them(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.jobs (task) VALUES ('keep.me')")
    upgrade(dsn, "pgqueue")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT task FROM pgqueue.jobs").fetchall() == [("keep.me",)]


def test_downgrade_to_base_removes_every_object_and_upgrade_restores_them(
    empty_dsn: str,
) -> None:
    upgrade(empty_dsn, "pgqueue")
    migrated = _snapshot(empty_dsn, "pgqueue")
    assert "relation jobs (r)" in _schema_objects(empty_dsn, "pgqueue")

    downgrade(empty_dsn, "pgqueue", "base")
    # Alembic keeps its (now empty) version table; nothing of pgqueue's own remains.
    assert _schema_objects(empty_dsn, "pgqueue") == [
        "relation alembic_version (r)",
        "relation alembic_version_pkc (i)",
    ]
    with psycopg.connect(empty_dsn) as conn:
        assert current_revision(conn, "pgqueue") is None
        with pytest.raises(SchemaOutOfDate):
            check_schema(conn, "pgqueue")

    upgrade(empty_dsn, "pgqueue")
    assert _snapshot(empty_dsn, "pgqueue") == migrated


def test_migrating_a_custom_schema_builds_the_same_objects_there_only(
    databases: DatabaseFactory,
) -> None:
    reference = databases.migrated("pgqueue")
    custom = databases.empty()
    upgrade(custom, "custom_q")

    assert "pgqueue" not in _schemas(custom)
    assert "custom_q" in _schemas(custom)
    # The snapshot writes the schema name as {schema} and the channel as {channel}.
    assert _snapshot(custom, "custom_q") == _snapshot(reference, "pgqueue")
    with psycopg.connect(custom) as conn:
        trigger = conn.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_notify_insert'"
        ).fetchone()
        assert trigger is not None
        assert "custom_q.notify_jobs_ready('custom_q_jobs')" in trigger[0]
        check_schema(conn, "custom_q")
        with pytest.raises(SchemaOutOfDate):
            check_schema(conn, "pgqueue")


def test_two_schemas_in_one_database_are_independent(empty_dsn: str) -> None:
    upgrade(empty_dsn, "pgqueue")
    upgrade(empty_dsn, "custom_q")
    downgrade(empty_dsn, "custom_q", "base")
    with psycopg.connect(empty_dsn) as conn:
        check_schema(conn, "pgqueue")
        assert current_revision(conn, "custom_q") is None
    assert "relation jobs (r)" in _schema_objects(empty_dsn, "pgqueue")
    assert "relation jobs (r)" not in _schema_objects(empty_dsn, "custom_q")


@pytest.mark.parametrize(
    "name",
    ["my schema", 'q"uote', "it's", "1starts_with_digit", "", "x" * 64, "semi;colon", "dash-ed",
     "x" * 59],
)
def test_schema_names_that_are_not_plain_identifiers_are_rejected(name: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        validate_schema_name(name)


@pytest.mark.parametrize("name", ["pgqueue", "custom_q", "_q1", "Q", "x" * 58])
def test_plain_identifiers_are_accepted_as_schema_names(name: str) -> None:
    assert validate_schema_name(name) == name


def test_upgrade_refuses_a_bad_schema_name_before_touching_the_database(empty_dsn: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        upgrade(empty_dsn, 'bad"schema')
    assert _schemas(empty_dsn) == {"public"}


@pytest.mark.parametrize("schema", ["pgqueue", "custom_q"])
def test_version_table_is_private_to_the_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn) as conn:
        location = conn.execute(
            """
            SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = 'alembic_version' AND c.relkind = 'r'
            """
        ).fetchall()
        assert location == [(schema,)]
        version = conn.execute(
            sql.SQL("SELECT version_num FROM {}.alembic_version").format(sql.Identifier(schema))
        ).fetchall()
        assert version == [(head_revision(),)]


@pytest.mark.parametrize("schema", ["pgqueue", "custom_q"])
def test_printed_sql_run_with_psql_builds_the_same_schema_as_upgrade(
    dsn: str, empty_dsn: str, schema: str
) -> None:
    script = upgrade_sql(schema)
    assert "BEGIN" in script and "COMMIT" in script
    result = subprocess.run(
        [find_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"psql failed:\n{result.stderr}"
    assert "ERROR" not in result.stderr
    assert _snapshot(empty_dsn, schema) == _snapshot(dsn, schema)
    # The printed SQL records the revision, so a later upgrade() has nothing to do.
    with psycopg.connect(empty_dsn) as conn:
        check_schema(conn, schema)
    upgrade(empty_dsn, schema)
    assert _snapshot(empty_dsn, schema) == _snapshot(dsn, schema)


# Each child announces it is ready, waits for the "go" file, then migrates: all three
# start their upgrade within milliseconds of each other.
_MIGRATE_WHEN_TOLD = """
import pathlib, sys, time
from pgqueue.db.migrate import upgrade
ready, go, dsn = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
ready.touch()
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.005)
upgrade(dsn, "pgqueue")
"""


def test_concurrent_upgrades_from_several_processes_all_succeed(
    empty_dsn: str, tmp_path: Path
) -> None:
    """Workers that each run migrate on boot queue up on the advisory lock in env.py
    instead of failing on each other's DDL."""
    go = tmp_path / "go"
    children = []
    for number in range(3):
        ready = tmp_path / f"ready-{number}"
        command = [sys.executable, "-c", _MIGRATE_WHEN_TOLD, str(ready), str(go), empty_dsn]
        children.append(
            (ready, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        )
    try:
        wait_until(lambda: all(ready.exists() for ready, _ in children), timeout=60)
        go.touch()
        outcomes = [(child.wait(timeout=120), child.communicate()) for _, child in children]
    finally:
        for _, child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for returncode, (_, stderr) in outcomes:
        assert returncode == 0, stderr.decode()
    with psycopg.connect(empty_dsn) as conn:
        check_schema(conn, "pgqueue")
        assert conn.execute("SELECT count(*) FROM pgqueue.alembic_version").fetchone() == (1,)


def test_concurrent_upgrades_from_several_threads_all_succeed(empty_dsn: str) -> None:
    """``q.migrate()`` called from several threads of one process (a web app's start-up
    hooks, a threaded test suite) must not trip over alembic's process-global
    ``alembic.context`` proxy: the calls have to be serialised in-process as well."""
    barrier = threading.Barrier(3, timeout=30)
    failures: list[BaseException] = []

    def migrate() -> None:
        try:
            barrier.wait()
            upgrade(empty_dsn, "pgqueue")
        except BaseException as exc:
            failures.append(exc)

    # Daemon threads with one shared deadline: a deadlocked upgrade fails the test
    # instead of hanging the suite (the per-test database drop cuts its connection).
    threads = [threading.Thread(target=migrate, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30  # one upgrade takes well under a second
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "an upgrade() deadlocked"
    assert failures == []
    with psycopg.connect(empty_dsn) as conn:
        check_schema(conn, "pgqueue")
        assert conn.execute("SELECT count(*) FROM pgqueue.alembic_version").fetchone() == (1,)


def test_check_schema_says_run_pgq_migrate_until_the_database_is_migrated(
    empty_dsn: str,
) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(SchemaOutOfDate, match="run pgq migrate") as raised:
            check_schema(conn, "pgqueue")
        assert str(raised.value) == (
            "schema 'pgqueue' of this database has not been migrated for pgqueue (no revision "
            f"recorded; this version needs {head_revision()}): run pgq migrate"
        )
        upgrade(empty_dsn, "pgqueue")
        check_schema(conn, "pgqueue")


def test_check_schema_rejects_a_database_whose_revision_is_missing(
    conn: psycopg.Connection[Any],
) -> None:
    # With the version row gone (and no other alembic_version table naming a pgqueue
    # revision) the schema's state is unknown: refused. An *unknown* revision id, by
    # contrast, is taken as newer than this code (see test_user_alembic_env.py).
    conn.execute("DELETE FROM pgqueue.alembic_version")
    with pytest.raises(SchemaOutOfDate, match="run pgq migrate") as raised:
        check_schema(conn, "pgqueue")
    assert head_revision() in str(raised.value)


def _script_directory() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(resources.files("pgqueue.migrations")))
    config.set_main_option("path_separator", "os")
    return ScriptDirectory.from_config(config)


def test_revisions_carry_the_pgqueue_branch_label() -> None:
    """Users who run pgqueue's revisions from their own alembic environment upgrade
    ``pgqueue@head``; the label must resolve to the newest revision."""
    script = _script_directory()
    (labelled_head,) = script.get_revisions("pgqueue@head")
    assert labelled_head is not None
    assert labelled_head.revision == head_revision()
    base_revisions = [rev for rev in script.walk_revisions() if rev.down_revision is None]
    assert len(base_revisions) == 1
    assert "pgqueue" in base_revisions[0].branch_labels


def test_revision_chain_is_linear_and_ordered() -> None:
    script = _script_directory()
    assert len(script.get_heads()) == 1
    chain = [rev.revision for rev in script.walk_revisions("base", "heads")]
    # Revision ids are numbered (0001_initial, 0002_...), newest first when walked.
    assert chain == sorted(chain, reverse=True)
    assert all(rev[:4].isdigit() for rev in chain)


def test_upgrade_accepts_url_and_key_value_dsns(databases: DatabaseFactory) -> None:
    key_value = databases.empty()
    url = as_url(databases.empty())
    assert "=" in key_value and not key_value.startswith("postgresql://")
    assert url.startswith("postgresql://")
    for dsn in (key_value, url):
        upgrade(dsn, "pgqueue")
        with psycopg.connect(dsn) as conn:
            check_schema(conn, "pgqueue")
