"""Least privilege: what each kind of database role needs, and the GRANTs that give it.

Four roles, each with exactly what its pgqueue code paths use (``pgq roles --sql`` prints
the statements; ``docs/guides/deployment.md`` explains them):

* **owner** runs ``pgq migrate`` and owns the schema and every object in it. It needs no
  grant in the schema; to create the schema it needs CREATE on the database, or an
  administrator creates the schema for it (``CREATE SCHEMA … AUTHORIZATION owner``).
* **worker** runs ``pgq worker`` and the management commands (cancel, dead retry and
  purge): it reads and writes the three tables and reads the schema revision.
* **web** (an application that only enqueues) inserts jobs and reads jobs back:
  ``INSERT … RETURNING`` needs SELECT, so do the idempotency-key lookup, the ids of a
  COPY batch and ``Job.refresh()``/``wait()``; it draws ids from the identity sequence.
  It cannot update or delete a row.
* **monitor** (dashboards, ``pgq stats``/``jobs``/``workers``, SQL queries) only reads.

No role but the owner may alter the schema: the script revokes everything first and
grants no CREATE on the schema, and only the owner may ALTER or DROP what it owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from psycopg import sql

from pgqueue.bounds import name_problem, short_repr
from pgqueue.errors import ConfigurationError

__all__ = [
    "DEFAULT_ROLE_NAMES", "ROLE_KINDS", "SEQUENCE_PRIVILEGES", "TABLE_PRIVILEGES", "RoleNames",
    "describe", "grants_sql",
]

ROLE_KINDS: Final = ("owner", "worker", "web", "monitor")

DEFAULT_ROLE_NAMES: Final = {
    "owner": "pgqueue_owner",
    "worker": "pgqueue_worker",
    "web": "pgqueue_web",
    "monitor": "pgqueue_monitor",
}

_READ: Final = ("SELECT",)
_READ_WRITE: Final = ("SELECT", "INSERT", "UPDATE", "DELETE")

# Privileges per role kind and table. Every table of the schema must appear in each
# kind's map (tests/e2e/test_roles.py checks this against a migrated database): a
# migration that adds a table must decide who may touch it.
TABLE_PRIVILEGES: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    # job_steps (0009_job_steps): the worker records and reads a job's steps and deletes
    # them with the job (pruner, dead purge, purge_queue); an enqueue-only role never
    # touches them.
    # queues: claims read it; pgq queues pause|resume|set write it. An enqueue into a
    # bounded queue locks its row, but in the insert trigger, which runs as the owner
    # (SECURITY DEFINER), so the web role needs nothing on it.
    # workflows, workflow_edges: an enqueue of a workflow inserts into both; the triggers
    # of 0007_workflows, run by whoever finishes, kills or deletes a step (the worker
    # role), update edges and delete workflows.
    # job_counts (0011_job_counts): each worker upserts its outcome counts at every
    # heartbeat and maintenance deletes those past their retention; the monitor role reads
    # them (throughput), an enqueue-only role has no use for them.
    # schedules: workers declare code schedules and advance next_run_at at each tick;
    # pgq periodic add|remove|pause|resume write it (run by the worker role).
    "worker": {
        "jobs": _READ_WRITE, "dead_jobs": _READ_WRITE, "workers": _READ_WRITE,
        "queues": ("SELECT", "INSERT", "UPDATE"), "schedules": _READ_WRITE,
        "job_steps": _READ_WRITE, "alembic_version": _READ, "workflows": _READ_WRITE,
        "workflow_edges": _READ_WRITE, "job_counts": _READ_WRITE,
    },
    "web": {
        "jobs": ("SELECT", "INSERT"), "dead_jobs": _READ, "workers": (), "queues": (),
        "schedules": (), "job_steps": (), "alembic_version": _READ,
        "workflows": ("SELECT", "INSERT"), "workflow_edges": ("SELECT", "INSERT"),
        "job_counts": (),
    },
    "monitor": {
        "jobs": _READ, "dead_jobs": _READ, "workers": _READ, "queues": _READ,
        "schedules": _READ, "job_steps": _READ, "alembic_version": _READ,
        "workflows": _READ, "workflow_edges": _READ, "job_counts": _READ,
    },
}

# The identity sequence of jobs.id: nextval() for every enqueue (and the first id of a
# COPY batch), currval() to find the batch's last id.
SEQUENCE_PRIVILEGES: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "worker": {"jobs_id_seq": ("USAGE",)},
    "web": {"jobs_id_seq": ("USAGE",)},
    "monitor": {},
}

_PURPOSE: Final = {
    "worker": "runs pgq worker and the management commands (jobs cancel, dead retry/purge)",
    "web": "enqueues jobs and follows them (Job.refresh, Job.wait); cannot update or delete a row",
    "monitor": "reads everything (pgq stats, jobs list, workers, dashboards, SQL)",
}


@dataclass(frozen=True)
class RoleNames:
    """The database role names to grant to, one per kind."""

    owner: str = DEFAULT_ROLE_NAMES["owner"]
    worker: str = DEFAULT_ROLE_NAMES["worker"]
    web: str = DEFAULT_ROLE_NAMES["web"]
    monitor: str = DEFAULT_ROLE_NAMES["monitor"]

    def __post_init__(self) -> None:
        for kind in ROLE_KINDS:
            problem = name_problem(getattr(self, kind), max_length=63)
            if problem:
                raise ConfigurationError(
                    f"invalid {kind} role name {short_repr(getattr(self, kind))}: {problem}"
                )

    def of(self, kind: str) -> str:
        """The role name for ``kind`` (owner, worker, web or monitor)."""
        return str(getattr(self, kind))


def _statement(template: str, *parts: sql.Composable) -> str:
    return sql.SQL(template).format(*parts).as_string() + ";"


def _privileges(names: tuple[str, ...]) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL(name) for name in names)


def grants_sql(schema: str, roles: RoleNames, revision: str) -> str:
    """The GRANT script for ``schema``: run after ``pgq migrate`` as the owner.

    Idempotent and exact: it first revokes whatever the three roles held on the schema's
    tables and sequences, so running it again (after an upgrade) leaves exactly the
    privileges listed in :data:`TABLE_PRIVILEGES`.
    """
    schema_id = sql.Identifier(schema)
    create_schema = _statement(
        "CREATE SCHEMA {} AUTHORIZATION {}", schema_id, sql.Identifier(roles.owner)
    )
    lines = [
        f"-- pgqueue grants for schema {schema!r} (revision {revision}).",
        f"-- Run as the owner ({roles.owner}, the role that runs pgq migrate) or a superuser,",
        "-- after pgq migrate; run again after an upgrade. Safe to repeat.",
        "-- The roles must exist: CREATE ROLE name LOGIN PASSWORD '...';",
        "-- The owner needs CREATE on the database, or, made once by an administrator",
        f"-- before the first migrate: {create_schema}",
    ]
    lines.append("BEGIN;")
    for kind in ("worker", "web", "monitor"):
        role = sql.Identifier(roles.of(kind))
        lines.append(f"-- {kind} ({roles.of(kind)}): {_PURPOSE[kind]}")
        lines.append(_statement("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}", schema_id, role))
        lines.append(_statement("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}",
                                schema_id, role))
        lines.append(_statement("REVOKE ALL ON SCHEMA {} FROM {}", schema_id, role))
        lines.append(_statement("GRANT USAGE ON SCHEMA {} TO {}", schema_id, role))
        for table, privileges in TABLE_PRIVILEGES[kind].items():
            if privileges:
                lines.append(_statement(
                    "GRANT {} ON TABLE {} TO {}", _privileges(privileges),
                    sql.Identifier(schema, table), role,
                ))
        for sequence, privileges in SEQUENCE_PRIVILEGES[kind].items():
            lines.append(_statement(
                "GRANT {} ON SEQUENCE {} TO {}", _privileges(privileges),
                sql.Identifier(schema, sequence), role,
            ))
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def describe(roles: RoleNames) -> list[tuple[str, str, str]]:
    """(kind, role name, what it may do) for each role, for people."""
    rows = [("owner", roles.owner, "runs pgq migrate; owns the schema and every object in it")]
    for kind in ("worker", "web", "monitor"):
        by_privileges: dict[tuple[str, ...], list[str]] = {}
        for table, privileges in TABLE_PRIVILEGES[kind].items():
            if privileges:
                by_privileges.setdefault(privileges, []).append(table)
        parts = [f"{', '.join(p)} on {', '.join(t)}" for p, t in by_privileges.items()]
        parts += [f"{', '.join(p)} on {s}" for s, p in SEQUENCE_PRIVILEGES[kind].items()]
        rows.append((kind, roles.of(kind), f"{_PURPOSE[kind]}: {'; '.join(parts)}"))
    return rows
