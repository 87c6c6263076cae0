"""``pgq worker --log-format json|text``: one line per job outcome with its fields."""

from __future__ import annotations

import json

import psycopg

from tests.e2e._pgq import APP, pgq


def _enqueue(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.jobs (task, args) VALUES "
                     "('add', '[1, 2]'), ('add', '[3, 4]')")
        conn.execute("INSERT INTO pgqueue.jobs (task, max_attempts) VALUES ('doomed', 1)")


def test_json_logs_are_one_object_per_line_with_the_outcome_fields(dsn: str) -> None:
    _enqueue(dsn)
    result = pgq("worker", "-A", APP, "--dsn", dsn, "--burst", "--log-format", "json",
                 "--log-succeeded")
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    outcomes = [e for e in entries if "outcome" in e]
    assert sorted((e["task"], e["outcome"], e["level"]) for e in outcomes) == [
        ("add", "succeeded", "INFO"), ("add", "succeeded", "INFO"),
        ("doomed", "dead", "ERROR")]
    for entry in outcomes:
        assert {"time", "message", "job_id", "queue", "attempt", "duration_ms"} <= set(entry)
        assert entry["queue"] == "default" and entry["attempt"] == 1
    assert any(e["message"].startswith("Worker ") and "started" in e["message"]
               for e in entries)


def test_text_logs_carry_the_fields_as_key_value(dsn: str) -> None:
    _enqueue(dsn)
    result = pgq("worker", "-A", APP, "--dsn", dsn, "--burst", "--log-succeeded")
    assert result.returncode == 0, result.stderr
    succeeded = [line for line in result.stderr.splitlines() if " succeeded in " in line]
    assert len(succeeded) == 2
    for line in succeeded:
        assert " INFO pgqueue.worker: Job " in line
        for field in ("job_id=", "task=add", "queue=default", "attempt=1", "outcome=succeeded",
                      "duration_ms="):
            assert field in line, line
