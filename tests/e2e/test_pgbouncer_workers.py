"""Workers behind PgBouncer: real ``pgq worker`` processes whose ``--dsn``
leads to a real pgbouncer (tests/_pgbouncer.py), in transaction mode (two server
connections shared by every client) with ``pool_mode=transaction``, and in session mode.

Before: a worker could not start behind PgBouncer in either mode (it refuses the startup
``options`` that carried the session settings; with those ignored, in transaction mode,
``prepared statement "_pg3_0" already exists`` within 30 ms), a LISTEN through a
transaction pooler received nothing, silently, and a session pooler with too few server
connections left services waiting without a word until its query_wait_timeout.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator

import pytest

from tests._database import DatabaseServer
from tests._pgbouncer import PgBouncer, start_pgbouncer
from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, query, scalar
from tests.e2e._pgq import assert_one_line_error, pgq

JOBS = 600
WORKERS = 3


@pytest.fixture
def pooled(chaos_dsn: str, pgbouncer: PgBouncer) -> str:
    """The test's database through the pooler, with the DSN option that says so."""
    return pgbouncer.dsn(chaos_dsn) + " pool_mode=transaction"


@pytest.fixture
def session_pooler(database_server: DatabaseServer) -> Iterator[Callable[[int], PgBouncer]]:
    """Starts PgBouncers in session mode with a given pool size (stopped at the end)."""
    started: list[PgBouncer] = []

    def start(pool_size: int) -> PgBouncer:
        started.append(start_pgbouncer(database_server, pool_mode="session",
                                       pool_size=pool_size))
        return started[-1]

    yield start
    for bouncer in started:
        bouncer.stop()
        shutil.rmtree(bouncer.directory, ignore_errors=True)


def test_three_workers_behind_the_pooler_run_every_job_once(
    chaos_dsn: str, pooled: str, processes: Processes
) -> None:
    # Each worker claims and records outcomes through the pooler; its listener connects
    # to PostgreSQL directly (--listen-dsn); its tasks' ctx.transaction() goes through
    # the pooler. The run rows are written directly (record_dsn).
    workers = [
        processes.start_worker(pooled, record_dsn=chaos_dsn, concurrency=4,
                               extra=["--listen-dsn", chaos_dsn])
        for _ in range(WORKERS)
    ]
    with chaos_app(pooled) as app:
        app.chaos_job.enqueue_many([(n,) for n in range(JOBS)])
    wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs "
                                         "WHERE status = 'succeeded'") == JOBS,
               timeout=120, message=f"{JOBS} jobs succeeded\n{processes.logs()}")
    # Every job ran once, on its first attempt, and its ctx.transaction() write exists
    # once; the three workers shared the work.
    runs = query(chaos_dsn, "SELECT count(*), count(DISTINCT job_id), max(attempt), "
                            "count(DISTINCT worker_pid) FROM chaos_runs")[0]
    assert runs[:3] == (JOBS, JOBS, 1), runs
    assert runs[3] == WORKERS, runs
    assert scalar(chaos_dsn, "SELECT count(DISTINCT job_id) FROM chaos_effects") == JOBS
    assert scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE attempts <> 1") == 0
    # No round failed: nothing was retried, nothing was refused or prepared twice.
    for worker in workers:
        assert worker.alive(), worker.log()
        log = worker.log()
        assert "WARNING" not in log and "ERROR" not in log, log
    # Each listener is a direct connection (the pooler would show as another client).
    listeners = scalar(chaos_dsn, "SELECT count(*) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND "
                                  "starts_with(query, 'LISTEN ') AND "
                                  "starts_with(application_name, 'pgqueue worker ')")
    assert listeners == WORKERS


def test_the_direct_listen_connection_wakes_an_idle_worker_behind_the_pooler(
    chaos_dsn: str, pooled: str, processes: Processes
) -> None:
    # A poll interval no test waits for: a job that starts at once was woken by NOTIFY.
    worker = processes.start_worker(pooled, record_dsn=chaos_dsn, poll_interval=600,
                                    extra=["--listen-dsn", chaos_dsn])
    time.sleep(0.5)  # let the first wake-up's claim (at start) find nothing and sleep
    with chaos_app(pooled) as app:
        job = app.chaos_job.enqueue(1)
    wait_until(lambda: scalar(chaos_dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                              (job.id,)) == "succeeded",
               timeout=30, message=f"the job to run\n{worker.log()}")


def test_a_worker_with_no_listen_polls_and_says_what_it_costs(
    chaos_dsn: str, pooled: str, processes: Processes
) -> None:
    worker = processes.start_worker(pooled, record_dsn=chaos_dsn, poll_interval=0.5,
                                    extra=["--no-listen"])
    worker.wait_for_log(r"Not listening for notifications \(--no-listen\): a job starts "
                        r"up to the poll interval \(0\.5s\)")
    with chaos_app(pooled) as app:
        job = app.chaos_job.enqueue(1)
    wait_until(lambda: scalar(chaos_dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                              (job.id,)) == "succeeded",
               timeout=30, message=f"the job to run by polling\n{worker.log()}")
    assert scalar(chaos_dsn, "SELECT count(*) FROM pg_stat_activity "
                             "WHERE datname = current_database() "
                             "AND starts_with(query, 'LISTEN ')") == 0


def test_a_worker_behind_the_pooler_without_a_way_to_listen_refuses_to_start(
    pooled: str,
) -> None:
    result = pgq("worker", "-A", "tests.e2e.apps.cli_tasks:queue", "--dsn", pooled,
                 timeout=60)
    assert_one_line_error(result, "pool_mode=transaction", "--listen-dsn", "--no-listen")


@pytest.mark.parametrize(("options", "fragment"), [
    (["--listen-dsn", "host=x pool_mode=transaction"], "listen_dsn: the listen DSN must "
                                                        "reach PostgreSQL directly"),
    (["--listen-dsn", "nonsense"], "listen_dsn: malformed DSN"),
    (["--listen-dsn", "host=x", "--no-listen"], "not both"),
])
def test_bad_listen_options_get_one_line(pooled: str, options: list[str], fragment: str) -> None:
    result = pgq("worker", "-A", "tests.e2e.apps.cli_tasks:queue", "--dsn", pooled, *options,
                 timeout=60)
    assert_one_line_error(result, fragment)


def test_a_worker_behind_a_session_pooler_runs_jobs_with_its_settings(
    chaos_dsn: str, session_pooler: Callable[[int], PgBouncer], processes: Processes
) -> None:
    # Enough server connections for the worker's own five and its tasks' pool.
    through = session_pooler(12).dsn(chaos_dsn)
    worker = processes.start_worker(through, record_dsn=chaos_dsn)
    with chaos_app(chaos_dsn) as app:
        jobs = app.chaos_job.enqueue_many([(n,) for n in range(20)])
    wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs "
                                         "WHERE status = 'succeeded'") == len(jobs),
               timeout=60, message=f"the jobs to run\n{worker.log()}")
    assert "WARNING" not in worker.log(), worker.log()


def test_a_session_pooler_too_small_for_the_worker_is_reported_within_seconds(
    chaos_dsn: str, session_pooler: Callable[[int], PgBouncer], processes: Processes
) -> None:
    # Two server connections for a worker that needs five: the pooler accepts every
    # login and holds the others' first statement (for 120 s, its query_wait_timeout).
    worker = processes.start_worker(session_pooler(2).dsn(chaos_dsn), record_dsn=chaos_dsn,
                                    wait_registered=False)
    worker.wait_for_log(r"failed \(the first statement on a new connection did not finish "
                        r"within 10s: behind a pooler in session mode, give it a server "
                        r"connection for each of every worker's connections", timeout=40)
