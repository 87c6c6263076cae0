"""Bad input through the real ``pgq`` process: one line, the right words, exit status 1.

Regression tests for oversized keys, misleading error classes, forged log lines,
keyword arguments, what migrate did, and the traceback of a failing ``-A`` module.
Helpers come from tests/e2e/_pgq.py.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import psycopg

from pgqueue.db.migrate import downgrade, head_revision
from tests.e2e._pgq import (
    APP,
    assert_one_line_error,
    clean_environment,
    ok,
    pgq,
    stderr_lines,
)
from tests.e2e.test_cli import LOG_LINE, enqueue


def test_an_oversized_idempotency_key_is_refused_in_one_line(dsn: str) -> None:
    result = pgq("enqueue", "t", "--idempotency-key", "k" * 3000, "--dsn", dsn)
    assert_one_line_error(result, "invalid idempotency_key", "at most 1024 bytes")
    result = pgq("enqueue", "t", "--max-attempts", str(10**10), "--dsn", dsn)
    assert_one_line_error(result, "invalid max_attempts", "from 1 to 2147483647")


def test_a_failing_statement_is_a_database_error_not_an_unreachable_database(dsn: str) -> None:
    """A lock timeout is an OperationalError like a refused connection; the CLI used to
    say "cannot reach the database" for both."""
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE pgqueue.jobs IN ACCESS EXCLUSIVE MODE")
        env = clean_environment() | {"PGOPTIONS": "-c lock_timeout=200"}
        result = pgq("stats", "--dsn", dsn, env=env)
    assert_one_line_error(result, "database error: canceling statement due to lock timeout")


def test_task_names_are_checked_and_log_lines_cannot_be_forged(dsn: str) -> None:
    forged = "2025-01-01 00:00:00,000 INFO pgqueue.worker: Worker forged stopped."
    result = pgq("enqueue", f"evil\n{forged}", "--dsn", dsn)
    assert_one_line_error(result, "invalid task name", "printable")
    # A row inserted with plain SQL may still carry any name; the worker's log lines
    # escape it: the forged record never starts a line.
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO pgqueue.jobs (task, max_attempts) VALUES (%s, 1)",
                     (f"evil\n{forged}\x1b[31m",))
    worker = ok("worker", "-A", APP, "--dsn", dsn, "--burst")
    lines = worker.stderr.splitlines()
    assert not any(line.startswith(forged) for line in lines), worker.stderr
    assert "\x1b" not in worker.stderr
    dead = [line for line in lines if "is dead" in line]
    assert dead and "evil\\n2025-01-01" in dead[0] and "\\x1b[31m" in dead[0], worker.stderr
    assert all(LOG_LINE.match(line) or line.startswith("  ") for line in lines), worker.stderr


def test_keyword_arguments_from_pgq_enqueue_are_stored_as_given(dsn: str) -> None:
    validated = enqueue(dsn, "add", "--kwargs", '{"a": 1, "b": 2}', "-A", APP)
    mixed = enqueue(dsn, "add", "--args", "[3]", "--kwargs", '{"b": 4}', "-A", APP)
    unvalidated = enqueue(dsn, "anything", "--kwargs", '{"user_id": 7}')
    assert (validated["args"], validated["kwargs"]) == ([], {"a": 1, "b": 2})
    assert (mixed["args"], mixed["kwargs"]) == ([3], {"b": 4})
    assert (unvalidated["args"], unvalidated["kwargs"]) == ([], {"user_id": 7})
    ok("worker", "-A", APP, "--dsn", dsn, "--burst")
    with psycopg.connect(dsn) as conn:
        results: dict[int, Any] = dict(
            conn.execute("SELECT id, result FROM pgqueue.jobs WHERE task = 'add'"))
    assert results == {validated["id"]: 3, mixed["id"]: 7}


def test_migrate_says_what_it_created_or_upgraded(empty_dsn: str) -> None:
    created = ok("migrate", "--dsn", empty_dsn)
    assert created.stdout.strip() == f"Created schema 'pgqueue' at revision {head_revision()}."
    downgrade(empty_dsn, "pgqueue", "0002_lease_token")
    upgraded = ok("migrate", "--dsn", empty_dsn)
    assert upgraded.stdout.strip() == (
        f"Upgraded schema 'pgqueue' from revision 0002_lease_token to {head_revision()}."
    )
    again = ok("migrate", "--dsn", empty_dsn)
    assert again.stdout.strip() == (
        f"Schema 'pgqueue' is already at revision {head_revision()}; nothing to do."
    )


def test_enqueue_before_migrate_names_the_fix(empty_dsn: str) -> None:
    result = pgq("enqueue", "t", "--dsn", empty_dsn)
    line = assert_one_line_error(result, "run pgq migrate")
    assert "has not been migrated for pgqueue" in line


def test_an_import_error_in_the_app_module_shows_the_users_traceback_only(
    tmp_path: Path, dsn: str
) -> None:
    (tmp_path / "brokenapp.py").write_text(textwrap.dedent("""\
        import brokenhelper
        from pgqueue import Queue
        queue = Queue()
    """))
    (tmp_path / "brokenhelper.py").write_text(textwrap.dedent("""\
        def load():
            import a_dependency_that_is_not_installed
        load()
    """))
    result = pgq("worker", "-A", "brokenapp:queue", "--dsn", dsn, "--burst", cwd=tmp_path)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert lines[0] == "Traceback (most recent call last):"
    files = re.findall(r'^  File "([^"]+)"', result.stderr, flags=re.MULTILINE)
    assert files == [str(tmp_path / "brokenapp.py"), str(tmp_path / "brokenhelper.py"),
                     str(tmp_path / "brokenhelper.py")], result.stderr
    assert lines[-2] == (
        "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'"
    )
    assert lines[-1] == (
        "error: cannot import module 'brokenapp' (from -A brokenapp:queue): "
        "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'"
    )
    assert len(lines) <= 12, result.stderr


def test_a_syntax_error_in_the_app_module_names_the_file_and_line(
    tmp_path: Path, dsn: str
) -> None:
    (tmp_path / "badsyntax.py").write_text("from pgqueue import Queue\nqueue = Queue(\n")
    result = pgq("enqueue", "t", "-A", "badsyntax", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 1
    assert f'File "{tmp_path / "badsyntax.py"}", line 2' in result.stderr
    assert "pgqueue/" not in result.stderr.replace(str(tmp_path), "")
    assert stderr_lines(result)[-1].startswith(
        "error: cannot import module 'badsyntax' (from -A badsyntax): SyntaxError:"
    )
