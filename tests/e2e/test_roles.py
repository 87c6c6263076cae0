"""Least privilege, end to end: ``pgq migrate``, a worker, enqueue and the monitoring
queries, each under the role ``pgq roles --sql`` prepares for it, on a real server.

The roles are created by the test (names unique to the test session, dropped at the
end) in a database of their own. The owner gets the schema from an administrator
(``CREATE SCHEMA … AUTHORIZATION``, as docs/guides/deployment.md says) and needs no
CREATE privilege on the database; the GRANT script is exactly what ``pgq roles --sql``
prints, run through psql as the owner.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

from pgqueue import Queue, QueueFull
from pgqueue.db.roles import TABLE_PRIVILEGES
from tests._database import DatabaseServer, create_database, drop_database, find_psql
from tests.e2e._pgq import APP, TIMEOUT, assert_one_line_error, json_of, ok, pgq
from tests.e2e.apps import cli_tasks

KINDS = ("owner", "worker", "web", "monitor")


@dataclass(frozen=True)
class RoleSetup:
    """A database and one login role per kind, named uniquely for this test."""

    admin_dsn: str
    database: str
    names: dict[str, str]

    def dsn(self, kind: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=self.database, user=self.names[kind])


@pytest.fixture
def roles(database_server: DatabaseServer, session_token: str) -> Iterator[RoleSetup]:
    """Four login roles and a database; dropped (database first) after the test."""
    suffix = f"{session_token}_{secrets.token_hex(2)}"
    names = {kind: f"pgq_{kind}_{suffix}" for kind in KINDS}
    database = f"pgqueue_roles_{suffix}"
    admin = database_server.admin_dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names.values():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        create_database(admin, database)
        setup = RoleSetup(database_server.dsn(database), database, names)
        yield setup
    finally:
        drop_database(admin, database)
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _psql(dsn: str, script: str) -> None:
    subprocess.run(
        [find_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
        input=script, text=True, capture_output=True, check=True, timeout=TIMEOUT,
    )


def _refused(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, \
            pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement.encode())


def _prepare(roles: RoleSetup) -> None:
    """What an operator does: schema for the owner, migrate as owner, grants as owner."""
    with psycopg.connect(roles.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA pgqueue AUTHORIZATION {}").format(
            sql.Identifier(roles.names["owner"])))
    # Before the schema is migrated, a worker may not create it.
    refused = pgq("migrate", "--dsn", roles.dsn("worker"))
    assert_one_line_error(refused, "database error", "permission denied")
    created = ok("migrate", "--dsn", roles.dsn("owner"))
    assert "Created schema 'pgqueue'" in created.stdout
    script = ok("roles", "--sql", "--owner", roles.names["owner"],
                "--worker", roles.names["worker"], "--web", roles.names["web"],
                "--monitor", roles.names["monitor"]).stdout
    _psql(roles.dsn("owner"), script)
    _psql(roles.dsn("owner"), script)  # idempotent


def test_each_role_does_its_job_with_exactly_the_printed_grants(roles: RoleSetup) -> None:
    _prepare(roles)

    # A current schema: migrate needs no CREATE privilege, whoever runs it.
    for kind in ("worker", "web", "monitor"):
        again = ok("migrate", "--dsn", roles.dsn(kind))
        assert "already at revision" in again.stdout, (kind, again.stdout)

    # The web role enqueues on every API path.
    web = Queue(dsn=roles.dsn("web"))
    try:
        add = web.task(name="add")(cli_tasks.add.func)
        first = add.enqueue(1, 2)
        keyed = add.using(idempotency_key="k").enqueue(a=3, b=4)
        assert add.using(idempotency_key="k").enqueue(5, 6).id == keyed.id
        few = add.enqueue_many([(1, 1), {"a": 2, "b": 2}])
        bulk = add.enqueue_many([(n, n) for n in range(2000)])  # COPY
        by_name = web.enqueue_by_name("add", args=[7], kwargs={"b": 8})
        with psycopg.connect(roles.dsn("web")) as conn:
            in_transaction = add.using(conn=conn).enqueue(9, 9)
        async_job = asyncio.run(_enqueue_async(web))
        assert first.refresh().status == "queued"
        assert web.get_job(in_transaction.id) is not None
    finally:
        web.close()
    from_cli = json_of("enqueue", "add", "--args", "[20, 22]", "-A", APP,
                       "--dsn", roles.dsn("web"))
    total = 2 + len(few) + len(bulk) + 3 + 1
    assert len({first.id, keyed.id, by_name.id, in_transaction.id, async_job, from_cli["id"],
                *few.ids, *bulk.ids}) == total

    # From SQL: the web role may call pgqueue.enqueue() (it runs with the caller's
    # rights: the web role's INSERT), the monitoring role may not.
    with psycopg.connect(roles.dsn("web"), autocommit=True) as conn:
        conn.execute("SELECT pgqueue.enqueue('add', '[2, 3]')")
    total += 1
    _refused(roles.dsn("monitor"), "SELECT pgqueue.enqueue('add', '[2, 3]')")

    # Into a bounded queue (the worker role may set it): the web role's enqueue is
    # counted and refused beyond the bound by the insert trigger, run as the owner.
    ok("queues", "set", "capped", "--max-queued", "1", "--dsn", roles.dsn("worker"))
    capped = Queue(dsn=roles.dsn("web"))
    try:
        capped_add = capped.task(name="add", queue="capped")(cli_tasks.add.func)
        capped_add.enqueue(1, 1)
        with pytest.raises(QueueFull):
            capped_add.enqueue(2, 2)
    finally:
        capped.close()
    total += 1

    # The worker role runs them all, and manages jobs.
    ok("worker", "-A", APP, "--dsn", roles.dsn("worker"), "--burst", "--concurrency", "4")
    assert json_of("jobs", "show", str(from_cli["id"]), "--dsn", roles.dsn("monitor"))[
        "result"] == 42
    doomed = json_of("enqueue", "doomed", "--dsn", roles.dsn("web"))
    ok("worker", "-A", APP, "--dsn", roles.dsn("worker"), "--burst")
    with psycopg.connect(roles.dsn("monitor"), autocommit=True) as conn:  # its ctx.step
        assert conn.execute("SELECT job_id, name, result FROM pgqueue.job_steps").fetchall() \
            == [(doomed["id"], "reason", "doomed on purpose")]
    ok("dead", "retry", str(doomed["id"]), "--dsn", roles.dsn("worker"))
    ok("jobs", "cancel", str(doomed["id"]), "--dsn", roles.dsn("worker"))
    ok("dead", "purge", "--older-than", "0s", "--dsn", roles.dsn("worker"))

    # The monitoring role reads everything: the CLI's views and the documented queries.
    stats = json_of("stats", "--dsn", roles.dsn("monitor"))
    assert sum(row["succeeded"] for row in stats) == total
    assert json_of("jobs", "list", "--dsn", roles.dsn("monitor"))
    assert json_of("dead", "list", "--dsn", roles.dsn("monitor")) == []
    assert json_of("workers", "--dsn", roles.dsn("monitor")) == []
    assert [q["name"] for q in json_of("queues", "list", "--dsn", roles.dsn("monitor"))] == [
        "capped", "default"]
    with psycopg.connect(roles.dsn("monitor"), autocommit=True) as conn:
        conn.execute(
            "SELECT j.id, w.hostname FROM pgqueue.jobs j "
            "LEFT JOIN pgqueue.workers w ON w.id = j.worker_id WHERE j.status = 'running'"
        ).fetchall()
        conn.execute("SELECT task, substring(error FROM '[^\\n]*$'), count(*) "
                     "FROM pgqueue.dead_jobs GROUP BY 1, 2").fetchall()


def test_no_role_but_the_owner_can_change_the_schema(roles: RoleSetup) -> None:
    _prepare(roles)
    schema_changes = [
        "ALTER TABLE pgqueue.jobs ADD COLUMN sneaky int",
        "CREATE TABLE pgqueue.sneaky (id int)",
        "CREATE INDEX sneaky_idx ON pgqueue.jobs (task)",
        "DROP TABLE pgqueue.workers",
        "TRUNCATE pgqueue.jobs",
        "DROP TRIGGER jobs_notify_insert ON pgqueue.jobs",
        "UPDATE pgqueue.alembic_version SET version_num = 'x'",
        "ALTER SCHEMA pgqueue RENAME TO sneaky",
    ]
    for kind in ("worker", "web", "monitor"):
        for statement in schema_changes:
            _refused(roles.dsn(kind), statement)
    for statement in ("UPDATE pgqueue.jobs SET priority = 1", "DELETE FROM pgqueue.jobs",
                      "DELETE FROM pgqueue.workers", "DELETE FROM pgqueue.dead_jobs"):
        _refused(roles.dsn("web"), statement)
    _refused(roles.dsn("web"), "SELECT * FROM pgqueue.workers")
    _refused(roles.dsn("web"), "UPDATE pgqueue.queues SET paused = true")
    _refused(roles.dsn("monitor"), "INSERT INTO pgqueue.queues (name) VALUES ('q')")
    _refused(roles.dsn("monitor"), "INSERT INTO pgqueue.jobs (task) VALUES ('t')")
    with psycopg.connect(roles.dsn("owner"), autocommit=True) as conn:
        conn.execute("ALTER TABLE pgqueue.jobs ADD COLUMN allowed int")


def test_every_table_of_the_schema_has_a_decision_for_every_role(dsn: str) -> None:
    """A migration that adds a table must say in pgqueue.db.roles who may touch it."""
    with psycopg.connect(dsn) as conn:
        tables = {row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'pgqueue'")}
    for kind, privileges in TABLE_PRIVILEGES.items():
        assert set(privileges) == tables, kind


def test_the_grant_script_follows_the_schema_option() -> None:
    script = ok("roles", "--sql", "--schema", "other_q").stdout
    assert 'GRANT SELECT, INSERT ON TABLE "other_q"."jobs" TO "pgqueue_web";' in script
    assert '"pgqueue".' not in script
    summary = ok("roles").stdout
    assert "pgqueue_monitor" in summary and "owner" in summary


async def _enqueue_async(queue: Queue) -> int:
    try:
        job = await queue.tasks["add"].enqueue_async(a=1, b=1)
        return job.id
    finally:
        await queue.close_async()
