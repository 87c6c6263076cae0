"""check_health (pgqueue/health.py): live workers and the age of ready jobs, judged."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from pgqueue import Queue
from pgqueue.health import check_health


def _run(q: Queue, **thresholds: Any) -> Any:
    return q.run_plan(check_health(q.queries, **thresholds))


def _worker_row(conn: psycopg.Connection[Any], worker_id: str, *, alive: bool) -> None:
    conn.execute("INSERT INTO pgqueue.workers (id, hostname, pid, concurrency, "
                 "lease_expires_at) VALUES (%s, 'h', 1, 1, now() + %s * interval '1 minute')",
                 (worker_id, 1 if alive else -1))


def _job(conn: psycopg.Connection[Any], queue: str, minutes_ago: float,
         status: str = "queued") -> None:
    conn.execute("INSERT INTO pgqueue.jobs (queue, task, run_at, created_at) VALUES "
                 "(%s, 't', now() - %s * interval '1 minute', now() - %s * interval "
                 "'1 minute')", (queue, minutes_ago, minutes_ago))


@pytest.fixture
def db(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def test_no_live_worker_is_unhealthy(q: Queue, db: psycopg.Connection[Any]) -> None:
    report = _run(q)
    assert report.problems == ["0 live worker(s), fewer than 1"]
    assert report.summary() == "unhealthy: 0 live worker(s), fewer than 1"
    _worker_row(db, "expired", alive=False)
    assert _run(q).live_workers == 0
    _worker_row(db, "alive", alive=True)
    report = _run(q)
    assert report.healthy
    assert report.summary() == "healthy: 1 live worker(s), no job waiting"
    assert not _run(q, min_workers=2).healthy
    assert _run(q, min_workers=0, max_queue_age=None).healthy


def test_a_queue_whose_oldest_ready_job_waited_too_long_is_named(
    q: Queue, db: psycopg.Connection[Any]
) -> None:
    _worker_row(db, "alive", alive=True)
    _job(db, "mail", 10)
    _job(db, "mail", 1)
    _job(db, "fast", 0.5)
    _job(db, "later", -30)  # scheduled: not ready, not waiting
    _job(db, "done", 60, status="queued")
    db.execute("UPDATE pgqueue.jobs SET status = 'running', worker_id = 'alive', "
               "lease_expires_at = now() + interval '1 minute' WHERE queue = 'done'")

    report = _run(q, max_queue_age=300)
    assert len(report.problems) == 1
    assert re.fullmatch(r"oldest queued job in queue 'mail' is 10m\d\ds old, older than 5m00s",
                        report.problems[0]), report.problems
    assert [a.queue for a in report.oldest_ready] == ["mail", "fast"]
    assert report.to_dict()["oldest_ready"][0]["queue"] == "mail"

    assert _run(q, max_queue_age=None).healthy
    assert _run(q, max_queue_age=3600).healthy
    assert _run(q, max_queue_age=300, queues=["fast"]).healthy
    # Two queues too old: both named, oldest first.
    assert len(_run(q, max_queue_age=10).problems) == 2

    # A paused queue's jobs wait on purpose.
    q.pause_queue("mail")
    report = _run(q, max_queue_age=300)
    assert report.healthy, report.problems
    assert report.paused_queues == ["mail"]
