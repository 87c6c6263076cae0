"""The contract between pgqueue's SQL and the Python that reads it.

Every statement of :class:`Queries` renders for any schema name, and PostgreSQL accepts
it: preparing a statement parses it, resolves every table, column and function, and
infers its parameters. A statement declared with a row type returns exactly that type's
fields, by name and in order (rows are built from values in order, so a column added,
dropped or moved in its ``SELECT`` fails here rather than in a worker). And every
statement has a caller in the package, found by searching for its name.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from pgqueue.db.queries import Queries, Query, for_schema
from tests._prepared import as_prepared

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"
NAMES = sorted(Queries.templates())


def _statement(queries: Queries, name: str) -> bytes:
    value: bytes | Query[Any] = getattr(queries, name)
    return value.sql if isinstance(value, Query) else value


def _fields(row: Any) -> list[str]:
    if dataclasses.is_dataclass(row):
        return [field.name for field in dataclasses.fields(row)]
    return list(row._fields)  # a NamedTuple


def test_every_statement_renders_for_a_schema_that_needs_quoting() -> None:
    queries = Queries('Odd "Schema"')
    for name in NAMES:
        text = _statement(queries, name).decode()
        assert "{schema}" not in text, name
        assert "pgqueue" not in text, name
        if ".jobs" in text or ".workers" in text or ".dead_jobs" in text:
            assert '"Odd ""Schema"""' in text, name


def test_every_statement_prepares_and_returns_the_columns_of_its_row_type(
    conn: psycopg.Connection[Any],
) -> None:
    queries = for_schema("pgqueue")
    typed = 0
    for name in NAMES:
        text, _ = as_prepared(_statement(queries, name))
        prepared = conn.pgconn.prepare(name.encode(), text)
        assert prepared.status == pq.ExecStatus.COMMAND_OK, (
            f"{name}: {(prepared.error_message or b'').decode()}"
        )
        value = getattr(queries, name)
        if isinstance(value, Query):
            typed += 1
            described = conn.pgconn.describe_prepared(name.encode())
            columns = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
            assert columns == _fields(value.row), name
    assert typed >= 9  # the four claims, next_run_at, completion, heartbeat, rescue, stale


@pytest.mark.parametrize("name", NAMES)
def test_every_statement_has_a_caller_that_names_it(name: str) -> None:
    callers = [
        path for path in PACKAGE.rglob("*.py")
        if path.name != "queries.py"
        and re.search(rf"queries\.{name}\b", path.read_text(encoding="utf-8"))
    ]
    assert callers, f"no module of pgqueue/ runs queries.{name}: remove it or call it"
