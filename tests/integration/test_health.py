"""check_health (pgqueue/health.py): live workers and the age of ready jobs, judged."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from pgqueue import Queue
from pgqueue.health import check_health
from tests._polling import wait_until


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


def _running(conn: psycopg.Connection[Any], worker_id: str, *, lease_seconds: float) -> int:
    row = conn.execute(
        "INSERT INTO pgqueue.jobs (task, status, worker_id, attempts, started_at, "
        "lease_expires_at) VALUES ('t', 'running', %s, 1, now(), "
        "now() + %s * interval '1 second') RETURNING id", (worker_id, lease_seconds)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_running_jobs_no_live_worker_holds_are_named(
    q: Queue, db: psycopg.Connection[Any]
) -> None:
    _worker_row(db, "alive", alive=True)
    _worker_row(db, "gone", alive=False)  # its lease ran out a minute ago
    held = _running(db, "alive", lease_seconds=30)
    report = _run(q)
    assert report.healthy, report.problems
    assert report.database is not None and report.database.unheld_running == 0

    # Just expired: the rescuer has its 5 s to take it back before it counts.
    _running(db, "alive", lease_seconds=-1)
    assert _run(q).healthy
    lapsed = _running(db, "alive", lease_seconds=-6)
    orphan = _running(db, "gone", lease_seconds=30)  # a lease renewed, by a dead worker?
    nobody = _running(db, "never-registered", lease_seconds=30)
    report = _run(q)
    assert report.database is not None
    assert report.database.unheld_running == 3
    assert report.database.unheld_running_ids == sorted([lapsed, orphan, nobody])
    assert held not in report.database.unheld_running_ids
    assert report.problems == [
        f"3 running job(s) held by no live worker (lease ran out or worker gone, more than "
        f"5s ago): {', '.join(map(str, sorted([lapsed, orphan, nobody])))}"]
    assert report.to_dict()["database"]["unheld_running"] == 3


def test_a_held_vacuum_horizon_is_reported_and_judged(
    q: Queue, db: psycopg.Connection[Any], dsn: str
) -> None:
    _worker_row(db, "alive", alive=True)
    quiet = _run(q, max_horizon_age=0)
    assert quiet.database is not None
    assert quiet.database.horizon_age_seconds is None, quiet.database
    assert quiet.healthy, quiet.problems

    with psycopg.connect(dsn, application_name="nightly-report") as holder:
        holder.execute("SELECT txid_current()")  # a transaction id, then idle in it
        pid = holder.info.backend_pid
        report = wait_until(lambda: _held_for_a_while(q), timeout=10)
        database = report.database
        assert database.horizon_holder == f"session {pid} (idle in transaction, nightly-report)"
        assert database.horizon_age_xids is not None and database.horizon_age_xids >= 0
        assert len(report.problems) == 1
        assert re.fullmatch(
            rf"the xmin horizon is held for \ds by session {pid} \(idle in transaction, "
            r"nightly-report\), longer than 0s: vacuum removes no dead row meanwhile "
            r"\(\d+ dead tuples in jobs\)", report.problems[0]), report.problems
        assert _run(q).healthy  # the default allows 30 minutes
        assert _run(q, max_horizon_age=None).healthy
        holder.rollback()
    report = _run(q, max_horizon_age=0)
    assert report.database is not None and report.database.horizon_age_seconds is None


def _held_for_a_while(q: Queue) -> Any:
    report = _run(q, max_horizon_age=0)
    seconds = report.database.horizon_age_seconds
    return report if seconds is not None and seconds > 0.2 else None


def test_the_jobs_tables_dead_tuples_are_counted(q: Queue, db: psycopg.Connection[Any]) -> None:
    db.execute("INSERT INTO pgqueue.jobs (task) SELECT 't' FROM generate_series(1, 50)")
    db.execute("DELETE FROM pgqueue.jobs")
    # The statistics are flushed by each backend when it goes idle (at most a second on).
    database = wait_until(lambda: (d := _run(q).database) and d.jobs_dead_tuples >= 50 and d,
                          timeout=10)
    assert database.jobs_live_tuples == 0
    db.execute("VACUUM pgqueue.jobs")
    wait_until(lambda: (d := _run(q).database) and d.jobs_last_vacuum_at is not None
               and d.jobs_dead_tuples == 0, timeout=10, message="the vacuum counted")
