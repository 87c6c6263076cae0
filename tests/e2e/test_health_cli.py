"""``pgq health``: exit 0 and a ``healthy:`` line, or exit 1 and one line naming what is
wrong (no live worker, a queue waiting too long, the database out of reach); ``--json``."""

from __future__ import annotations

import json

import psycopg

from tests.e2e._pgq import UNREACHABLE_DSN, pgq, stderr_lines


def test_health_exit_codes_and_lines(dsn: str) -> None:
    unhealthy = pgq("health", "--dsn", dsn)
    assert unhealthy.returncode == 1, unhealthy.stderr
    assert stderr_lines(unhealthy) == ["unhealthy: 0 live worker(s), fewer than 1"]
    assert unhealthy.stdout == ""

    healthy = pgq("health", "--dsn", dsn, "--min-workers", "0")
    assert healthy.returncode == 0, healthy.stderr
    assert healthy.stdout == "healthy: 0 live worker(s), no job waiting\n"

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.jobs (queue, task, run_at) "
                     "VALUES ('mail', 't', now() - interval '10 minutes')")
    old = pgq("health", "--dsn", dsn, "--min-workers", "0", "--max-queue-age", "5m")
    assert old.returncode == 1
    (line,) = stderr_lines(old)
    assert line.startswith("unhealthy: oldest queued job in queue 'mail' is 10m"), line
    # (--max-queue-age off and --queues: tests/integration/test_health.py and the unit
    # test of max_age.)

    as_json = pgq("health", "--dsn", dsn, "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["healthy"] is False
    assert report["live_workers"] == 0
    assert len(report["problems"]) == 2
    assert report["oldest_ready"][0]["queue"] == "mail"


def test_health_of_an_unreachable_database_is_one_line_and_exit_1() -> None:
    result = pgq("health", "--dsn", UNREACHABLE_DSN)
    assert result.returncode == 1
    (line,) = stderr_lines(result)
    assert line.startswith("unhealthy: database unreachable: "), line
    as_json = pgq("health", "--dsn", UNREACHABLE_DSN, "--json")
    assert json.loads(as_json.stdout)["problems"][0].startswith("database unreachable")


def test_health_refuses_a_bad_threshold_in_one_line() -> None:
    result = pgq("health", "--dsn", UNREACHABLE_DSN, "--max-queue-age", "soon")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "error: invalid --max-queue-age 'soon': use plain seconds or a number with s, m, h "
        "or d (e.g. 30s, 15m, 1h, 7d)"]
