"""The examples of docs/guides/operations.md's sections on throughput and tracing run.

The SQL of "Throughput history: job_counts" runs against a database holding counts; the
Python of "Tracing" runs in a process of its own (it installs OpenTelemetry's global
tracer provider, which a process can do once) and checks what it stored. The earlier
sections' SQL reads pg_stat views or changes the server's configuration (ALTER SYSTEM),
which a test must not.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import psycopg

from tests.e2e._pgq import clean_environment
from tests.integration.test_docs_examples import DOCS, QUICKSTART_DSN

GUIDE = DOCS / "guides" / "operations.md"


def _section(heading: str, language: str) -> list[str]:
    """The code blocks in ``language`` of the section under ``## heading``."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(rf"(<!-- not executed: [^>]+-->\n)?```{language}\n(.*?)```", section,
                       flags=re.DOTALL)
    return [code for marker, code in found if not marker]


def test_the_job_counts_queries_run_and_read_the_counts(dsn: str) -> None:
    queries = _section("Throughput history: job_counts", "sql")
    assert len(queries) == 4
    results: list[list[Any]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""
            INSERT INTO pgqueue.job_counts (minute, queue, task, outcome, worker_id, count)
            VALUES (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'send',
                    'succeeded', 'w1', 40),
                   (date_trunc('minute', now()), 'mail', 'send', 'failed', 'w1', 10),
                   (date_trunc('minute', now()), 'mail', 'send', 'succeeded', 'w2', 50),
                   (now() - interval '167 hours 30 minutes', 'mail', 'send',
                    'succeeded', 'w3', 7)
        """)
        for query in queries:
            results.append(conn.execute(query.encode()).fetchall())
    per_minute, failures, week, per_worker = results
    assert sum(row[2] for row in per_minute) == 100
    # (attempts: 60 just after midnight, when the row of 2 minutes ago is yesterday's)
    assert failures[0][0] == "send" and failures[0][1] == 10 and failures[0][2] in (60, 100)
    assert week == [("mail", 90, 7)]
    assert dict(per_worker) == {"w1": 50, "w2": 50}


def test_the_tracing_example_runs_and_stores_the_trace_context(dsn: str) -> None:
    (code,) = _section("Tracing", "python")
    assert QUICKSTART_DSN in code
    subprocess.run([sys.executable, "-c", code.replace(QUICKSTART_DSN, dsn)],
                   env=clean_environment(), check=True, timeout=60, capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        (meta,) = conn.execute("SELECT meta FROM pgqueue.jobs").fetchone() or (None,)
    assert set(meta) == {"otel"} and meta["otel"]["traceparent"].startswith("00-")
