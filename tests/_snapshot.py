"""A normalized text dump of one pgqueue schema, built from the system catalogs.

Used by the schema-snapshot test (the migrated schema must match the checked-in
``tests/integration/schema_snapshot.txt``) and by the migration tests (``upgrade()``,
``pgq migrate --sql`` through psql, and a non-default schema name must all produce the
same schema).

The dump is independent of the server version and of the schema's name:

* everything is sorted by name (columns by position, which ``SELECT *`` exposes);
* PostgreSQL 18 records ``NOT NULL`` as constraints (``contype = 'n'``); those are left
  out, nullability is shown on the column for every version;
* the schema name becomes ``{schema}`` and the NOTIFY channel ``{channel}``;
* owners, OIDs, tablespaces and privileges, which differ between servers, are not shown.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgqueue.db.names import notify_channel

__all__ = ["schema_snapshot"]

_RELATION_KINDS = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
}
_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}


def _normalizer(conn: psycopg.Connection[Any], schema: str) -> Any:
    # pg_get_indexdef() and friends quote the way quote_ident() does (only when needed).
    row = conn.execute("SELECT quote_ident(%s)", (schema,)).fetchone()
    assert row is not None
    qualified = str(row[0]) + "."
    # Function bodies keep the name as the migration wrote it: always quoted.
    quoted = sql.Identifier(schema).as_string(conn) + "."
    channel = sql.Literal(notify_channel(schema)).as_string(conn)

    def normalize(text: str | None) -> str:
        if text is None:
            return ""
        return (text.replace(quoted, "{schema}.").replace(qualified, "{schema}.")
                .replace(channel, "'{channel}'"))

    return normalize


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _table_lines(
    conn: psycopg.Connection[Any], oid: int, normalize: Any, *, triggers: bool
) -> list[str]:
    lines: list[str] = []
    columns = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
               col_description(a.attrelid, a.attnum),
               CASE WHEN a.attcollation <> t.typcollation
                    THEN (SELECT collname FROM pg_collation WHERE oid = a.attcollation) END
          FROM pg_attribute a
          JOIN pg_type t ON t.oid = a.atttypid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum
        """,
        (oid,),
    ).fetchall()
    for name, type_, notnull, default, identity, generated, comment, collation in columns:
        parts = [f"  column {name} {type_}"]
        if collation:
            parts.append(f"COLLATE {collation}")
        if notnull:
            parts.append("NOT NULL")
        if identity:
            parts.append(
                "GENERATED " + ("ALWAYS" if identity == "a" else "BY DEFAULT") + " AS IDENTITY"
            )
        if generated:
            parts.append(f"GENERATED ALWAYS AS ({normalize(default)}) STORED")
        elif default is not None:
            parts.append(f"DEFAULT {normalize(default)}")
        lines.append(" ".join(parts))
        if comment is not None:
            lines.append(f"    comment: {comment}")
    for name, definition in conn.execute(
        """
        SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
         WHERE conrelid = %s AND contype <> 'n'
         ORDER BY conname
        """,
        (oid,),
    ):
        lines.append(f"  constraint {name}: {normalize(definition)}")
    for name, definition in conn.execute(
        """
        SELECT i.relname, pg_get_indexdef(x.indexrelid)
          FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
         WHERE x.indrelid = %s
         ORDER BY i.relname
        """,
        (oid,),
    ):
        lines.append(f"  index {name}: {normalize(definition)}")
    if not triggers:
        return lines
    for name, definition, enabled in conn.execute(
        """
        SELECT tgname, pg_get_triggerdef(oid), tgenabled FROM pg_trigger
         WHERE tgrelid = %s AND NOT tgisinternal
         ORDER BY tgname
        """,
        (oid,),
    ):
        state = "" if enabled == "O" else f" (enabled={enabled})"
        lines.append(f"  trigger {name}{state}: {normalize(definition)}")
    return lines


def _relations(
    conn: psycopg.Connection[Any], schema: str, normalize: Any, *, tables_only: bool
) -> list[str]:
    lines: list[str] = []
    relations = conn.execute(
        """
        SELECT c.oid, c.relname, c.relkind::text, c.reloptions, c.relpersistence::text,
               c.relrowsecurity, obj_description(c.oid, 'pg_class'),
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
         ORDER BY c.relname
        """,
        (schema,),
    ).fetchall()
    for oid, name, kind, options, persistence, rowsecurity, comment, viewdef in relations:
        if tables_only and name == "alembic_version":
            continue
        header = _RELATION_KINDS[kind]
        if persistence == "u":
            header = "unlogged " + header
        lines.append(f"{header} {name}")
        if comment is not None:
            lines.append(f"  comment: {comment}")
        if options:
            lines.append(f"  options: {', '.join(sorted(options))}")
        if rowsecurity:
            lines.append("  row level security: enabled")
        if viewdef is not None:
            lines.append(f"  definition: {normalize(_one_line(viewdef))}")
        lines.extend(_table_lines(conn, oid, normalize, triggers=not tables_only))
        lines.append("")
    return lines


def _sequences(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute(
        """
        SELECT c.relname, format_type(s.seqtypid, NULL), owner.relname, a.attname,
               d.deptype::text
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_sequence s ON s.seqrelid = c.oid
          LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
                               AND d.refclassid = 'pg_class'::regclass
                               AND d.deptype IN ('a', 'i')
          LEFT JOIN pg_class owner ON owner.oid = d.refobjid
          LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
         WHERE n.nspname = %s AND c.relkind = 'S'
         ORDER BY c.relname
        """,
        (schema,),
    ).fetchall()
    lines = []
    for name, type_, table, column, deptype in rows:
        owner = ""
        if table is not None:
            how = "identity of" if deptype == "i" else "owned by"
            owner = f" ({how} {table}.{column})"
        lines.append(f"sequence {name} {type_}{owner}")
    return [*lines, ""] if lines else []


def _types(conn: psycopg.Connection[Any], schema: str, normalize: Any) -> list[str]:
    rows = conn.execute(
        """
        SELECT t.typname, t.typtype::text,
               (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                  FROM pg_enum e WHERE e.enumtypid = t.oid),
               CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END,
               (SELECT string_agg(pg_get_constraintdef(c.oid), ' ' ORDER BY c.conname)
                  FROM pg_constraint c WHERE c.contypid = t.oid)
          FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
         WHERE n.nspname = %s AND t.typtype IN ('e', 'd')
         ORDER BY t.typname
        """,
        (schema,),
    ).fetchall()
    lines = []
    for name, kind, labels, base, checks in rows:
        if kind == "e":
            lines.append(f"enum {name} ({labels})")
        else:
            lines.append(f"domain {name} {base} {normalize(checks)}".rstrip())
    return [*lines, ""] if lines else []


def _functions(conn: psycopg.Connection[Any], schema: str, normalize: Any) -> list[str]:
    rows = conn.execute(
        """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, p.prokind::text,
               p.provolatile::text, p.prosecdef, p.proconfig, p.prosrc
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
          JOIN pg_language l ON l.oid = p.prolang
         WHERE n.nspname = %s
         ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
        """,
        (schema,),
    ).fetchall()
    lines: list[str] = []
    for name, args, result, language, kind, volatility, secdef, config, source in rows:
        what = {"f": "function", "p": "procedure", "a": "aggregate", "w": "window"}[kind]
        line = f"{what} {name}({args})"
        if result:
            line += f" RETURNS {normalize(result)}"
        line += f" LANGUAGE {language} {_VOLATILITY[volatility].upper()}"
        if secdef:
            line += " SECURITY DEFINER"
        if config:
            line += " SET " + ", ".join(sorted(config))
        lines.append(line)
        for body_line in (source or "").splitlines():
            if body_line.strip():
                lines.append("    | " + normalize(body_line.strip()))
        lines.append("")
    return lines


def schema_snapshot(
    conn: psycopg.Connection[Any], schema: str, *, tables_only: bool = False
) -> str:
    """The normalized dump of ``schema`` (see the module docstring), ending in a newline.

    ``tables_only`` leaves out what SQLAlchemy ``Table`` objects cannot describe (the
    alembic version table and revision, triggers and functions), to compare the
    migrated schema with ``pgqueue.db.schema``'s ``metadata.create_all()``.
    """
    # Timestamp constants in constraints (jobs_times_in_range) are shown in the session's
    # time zone: pin it, so that servers set up differently give the same text.
    conn.execute("SET TimeZone = 'UTC'")
    normalize = _normalizer(conn, schema)
    lines = [
        "# Generated by tests/_snapshot.py from the system catalogs; do not edit.",
        "# Regenerate: PGQUEUE_UPDATE_SNAPSHOT=1 pytest tests/integration/test_schema_snapshot.py",
        "",
    ]
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL",
        (sql.Identifier(schema, "alembic_version").as_string(conn),),
    ).fetchone()
    if exists is not None and exists[0] and not tables_only:
        versions = conn.execute(
            sql.SQL("SELECT version_num FROM {}.alembic_version ORDER BY 1").format(
                sql.Identifier(schema)
            )
        ).fetchall()
        lines += [f"alembic revision: {', '.join(row[0] for row in versions) or '(none)'}", ""]
    lines += _types(conn, schema, normalize)
    lines += _relations(conn, schema, normalize, tables_only=tables_only)
    lines += _sequences(conn, schema)
    if not tables_only:
        lines += _functions(conn, schema, normalize)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
