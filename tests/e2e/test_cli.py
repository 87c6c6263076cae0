"""End-to-end tests of the ``pgq`` command line: real ``pgq`` processes, real databases.

Every test runs the installed console script through ``tests/e2e/_pgq.py`` (a clean
environment, the repository on ``PYTHONPATH``) against the database of the ``dsn``
fixture (migrated) or ``empty_dsn``. Worker tests import their tasks from
``tests/e2e/apps/cli_tasks.py``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests._database import find_psql
from tests._polling import wait_until
from tests.e2e._pgq import (
    APP,
    REPO,
    TIMEOUT,
    UNREACHABLE_DSN,
    assert_one_line_error,
    clean_environment,
    json_of,
    ok,
    pgq,
    pgq_executable,
    stderr_lines,
)

JOB_KEYS = {
    "id", "queue", "task", "args", "kwargs", "status", "priority", "run_at", "attempts",
    "max_attempts", "idempotency_key", "lease_expires_at", "worker_id", "last_error",
    "result", "meta", "created_at", "started_at", "finished_at",
}
STATS_KEYS = {
    "queue", "queued", "scheduled", "running", "succeeded", "dead", "oldest_queued_age_seconds",
}
WORKER_KEYS = {
    "id", "hostname", "pid", "queues", "concurrency", "started_at", "last_heartbeat_at",
    "status",
}
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


def enqueue(dsn: str, task: str, *options: str) -> dict[str, Any]:
    job: dict[str, Any] = json_of("enqueue", task, *options, "--dsn", dsn)
    return job


def run_burst_worker(dsn: str, *options: str) -> subprocess.CompletedProcess[str]:
    return ok("worker", "-A", APP, "--dsn", dsn, "--burst", *options)


# -- migrate ---------------------------------------------------------------------------


def test_migrate_twice_is_idempotent(empty_dsn: str) -> None:
    first = ok("migrate", "--dsn", empty_dsn)
    second = ok("migrate", "--dsn", empty_dsn)
    # The first run says what it created, the second that there was nothing to do.
    assert "Created schema 'pgqueue' at revision 0" in first.stdout
    assert "already at revision 0" in second.stdout and "nothing to do" in second.stdout
    assert json_of("stats", "--dsn", empty_dsn) == []


def test_migrate_sql_needs_no_database_and_runs_through_psql(empty_dsn: str) -> None:
    # No --dsn and no DSN in the environment: printing the SQL must not need a database.
    ddl = ok("migrate", "--sql").stdout
    assert "CREATE TABLE" in ddl
    subprocess.run(
        [find_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
        input=ddl, text=True, capture_output=True, check=True, timeout=TIMEOUT,
    )
    # The database is now at the head revision: commands that check the schema work,
    # and migrate has nothing left to do.
    assert json_of("stats", "--dsn", empty_dsn) == []
    ok("migrate", "--dsn", empty_dsn)


def test_custom_schema_end_to_end(empty_dsn: str) -> None:
    ok("migrate", "--dsn", empty_dsn, "--schema", "cli_jobs")
    job = enqueue(empty_dsn, "add", "--args", "[20, 22]", "--schema", "cli_jobs")
    run_burst_worker(empty_dsn, "--schema", "cli_jobs")
    shown = json_of("jobs", "show", str(job["id"]), "--dsn", empty_dsn, "--schema", "cli_jobs")
    assert (shown["status"], shown["result"]) == ("succeeded", 42)
    # The default schema was never created in this database.
    result = pgq("stats", "--dsn", empty_dsn)
    assert_one_line_error(result, "run pgq migrate")


# -- worker ----------------------------------------------------------------------------


def test_burst_worker_runs_jobs_enqueued_with_pgq_enqueue(dsn: str) -> None:
    added = enqueue(dsn, "add", "--args", "[2, 3]", "-A", APP)
    echoed = enqueue(dsn, "async_echo", "--kwargs", '{"value": {"hello": "world"}}')
    later = enqueue(dsn, "add", "--args", "[1, 1]", "--run-in", "1h")
    assert (added["status"], later["status"]) == ("queued", "scheduled")

    worker = run_burst_worker(dsn, "--concurrency", "2", "--lease", "30s")

    assert json_of("jobs", "show", str(added["id"]), "--dsn", dsn)["result"] == 5
    assert json_of("jobs", "show", str(echoed["id"]), "--dsn", dsn)["result"] == {
        "hello": "world"
    }
    # --burst leaves jobs that are not due yet for other workers.
    assert json_of("jobs", "show", str(later["id"]), "--dsn", dsn)["status"] == "scheduled"
    lines = stderr_lines(worker)
    assert lines and all(LOG_LINE.match(line) for line in lines), worker.stderr
    assert any("started" in line for line in lines)


def test_worker_logs_structured_fields(dsn: str) -> None:
    job = enqueue(dsn, "doomed")
    worker = run_burst_worker(dsn)
    dead_lines = [line for line in stderr_lines(worker) if f"job_id={job['id']}" in line]
    assert dead_lines, worker.stderr
    assert " ERROR " in dead_lines[0] and "task=doomed" in dead_lines[0]


def test_worker_reads_app_from_environment(dsn: str) -> None:
    job = enqueue(dsn, "add", "--args", "[4, 5]")
    env = clean_environment() | {"PGQUEUE_APP": APP}
    ok("worker", "--dsn", dsn, "--burst", env=env)
    assert json_of("jobs", "show", str(job["id"]), "--dsn", dsn)["result"] == 9


def test_worker_without_app_is_a_usage_error(dsn: str) -> None:
    result = pgq("worker", "--dsn", dsn, "--burst")
    assert result.returncode == 2
    assert "PGQUEUE_APP" in result.stderr and "Usage:" in result.stderr


def test_worker_with_unknown_module_fails_in_one_line(dsn: str) -> None:
    result = pgq("worker", "-A", "tests.e2e.apps.no_such_module:queue", "--dsn", dsn)
    assert_one_line_error(result, "no_such_module")


def test_worker_refuses_unmigrated_schema(empty_dsn: str) -> None:
    result = pgq("worker", "-A", APP, "--dsn", empty_dsn, "--burst")
    assert_one_line_error(result, "run pgq migrate")


def test_worker_malformed_dsn_fails_at_once() -> None:
    result = pgq("worker", "-A", APP, "--dsn", "mysql://root@localhost/db", timeout=30)
    assert_one_line_error(result, "malformed DSN")


def test_worker_retries_unreachable_database_then_fails() -> None:
    result = pgq("worker", "-A", APP, "--dsn", UNREACHABLE_DSN, "--connect-timeout", "2s")
    lines = stderr_lines(result)
    assert result.returncode != 0
    assert lines[-1].startswith("error: ") and "could not connect" in lines[-1], lines
    retries = [line for line in lines[:-1] if "Cannot connect to the database" in line]
    assert len(retries) >= 2, result.stderr  # each attempt is logged


def test_worker_invalid_duration_fails_in_one_line(dsn: str) -> None:
    result = pgq("worker", "-A", APP, "--dsn", dsn, "--lease", "soon")
    assert_one_line_error(result, "soon")


def test_workers_lists_a_running_worker_then_sigterm_drains(dsn: str) -> None:
    process = subprocess.Popen(
        [pgq_executable(), "worker", "-A", APP, "--dsn", dsn, "--queues", "a,b",
         "--concurrency", "3", "--poll-interval", "1s"],
        cwd=REPO, env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rows = wait_until(lambda: json_of("workers", "--dsn", dsn), timeout=60)
        assert len(rows) == 1
        assert set(rows[0]) >= WORKER_KEYS
        assert rows[0]["queues"] == ["a", "b"]
        assert (rows[0]["concurrency"], rows[0]["status"]) == (3, "alive")
        assert rows[0]["pid"] == process.pid
        human = ok("workers", "--dsn", dsn).stdout
        assert rows[0]["id"] in human
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert json_of("workers", "--dsn", dsn) == []


def test_workers_shows_a_worker_whose_row_lease_ran_out_as_expired(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("INSERT INTO pgqueue.workers (id, hostname, pid, concurrency, "
                 "last_heartbeat_at, lease_expires_at) VALUES ('gone:1:x', 'gone', 1, 4, "
                 "now() - interval '1 minute', now() - interval '1 second')")
    rows = json_of("workers", "--dsn", dsn)
    assert [(row["id"], row["status"], row["queues"]) for row in rows] == [
        ("gone:1:x", "expired", [])]
    human = ok("workers", "--dsn", dsn).stdout
    assert re.search(r"gone:1:x .* \(all\) .* \d+s ago +expired", human), human


# -- connection errors -----------------------------------------------------------------


def test_missing_dsn_names_every_source() -> None:
    result = pgq("stats")
    line = assert_one_line_error(result)
    for source in ("--dsn", "PGQUEUE_DSN", "DATABASE_URL", "--embedded"):
        assert source in line


def test_bad_dsn_is_one_line() -> None:
    assert_one_line_error(pgq("jobs", "list", "--dsn", "mysql://x@y/z"), "malformed DSN")
    assert_one_line_error(pgq("stats", "--dsn", "host=x port=1 nonsense"), "malformed DSN")


def test_unreachable_database_fails_at_once_for_other_commands() -> None:
    result = pgq("stats", "--dsn", UNREACHABLE_DSN, timeout=30)
    assert_one_line_error(result, "cannot reach the database")


def test_dsn_before_the_command_works_too(dsn: str) -> None:
    rows = json.loads(ok("--dsn", dsn, "stats", "--json").stdout)
    assert rows == []


def test_dsn_and_embedded_together_is_a_usage_error(dsn: str) -> None:
    result = pgq("stats", "--dsn", dsn, "--embedded")
    assert result.returncode == 2 and "Usage:" in result.stderr


# -- enqueue and jobs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--args", "[1,"), ("--args", '{"a": 1}'), ("--kwargs", "[1]"), ("--kwargs", "nope")],
)
def test_invalid_json_arguments_are_one_line(dsn: str, option: str, value: str) -> None:
    result = pgq("enqueue", "add", option, value, "--dsn", dsn)
    assert_one_line_error(result, option)
    assert json_of("jobs", "list", "--dsn", dsn) == []


def test_registered_task_validates_arguments_with_app(dsn: str) -> None:
    result = pgq("enqueue", "add", "--args", '["x", 1]', "-A", APP, "--dsn", dsn)
    assert_one_line_error(result, "add")
    assert json_of("jobs", "list", "--dsn", dsn) == []


def test_enqueue_options_and_json_shape(dsn: str) -> None:
    job = enqueue(
        dsn, "add", "--args", "[1, 2]", "--queue", "high", "--priority", "7",
        "--max-attempts", "5", "--idempotency-key", "once", "--run-in", "15m",
    )
    assert set(job) >= JOB_KEYS
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("high", 7, 5)
    assert (job["status"], job["idempotency_key"], job["args"]) == ("scheduled", "once", [1, 2])
    again = enqueue(dsn, "add", "--args", "[1, 2]", "--idempotency-key", "once")
    assert again["id"] == job["id"]
    human = ok("enqueue", "add", "--args", "[3, 4]", "--dsn", dsn)
    assert re.match(r"^Enqueued job \d+: add on queue 'default' \(queued\)$",
                    human.stdout.strip()), human.stdout
    assert human.stderr.startswith("note: not validated: without -A"), human.stderr
    validated = ok("enqueue", "add", "--args", "[3, 4]", "--dsn", dsn, "-A", APP)
    assert validated.stderr == "", validated.stderr


def test_jobs_list_filters_and_json_shape(dsn: str) -> None:
    first = enqueue(dsn, "add", "--args", "[1, 2]", "--queue", "q1")
    second = enqueue(dsn, "async_echo", "--args", "[1]", "--queue", "q2")
    listed = json_of("jobs", "list", "--dsn", dsn)
    assert [job["id"] for job in listed] == [second["id"], first["id"]]
    assert all(set(job) >= JOB_KEYS for job in listed)
    assert [j["id"] for j in json_of("jobs", "list", "--queue", "q1", "--dsn", dsn)] == [
        first["id"]
    ]
    assert [j["id"] for j in json_of("jobs", "list", "--task", "async_echo", "--dsn", dsn)] == [
        second["id"]
    ]
    assert json_of("jobs", "list", "--status", "succeeded", "--dsn", dsn) == []
    assert len(json_of("jobs", "list", "--limit", "1", "--dsn", dsn)) == 1
    human = ok("jobs", "list", "--dsn", dsn).stdout
    assert "async_echo" in human and "q1" in human
    assert_one_line_error(pgq("jobs", "list", "--status", "bogus", "--dsn", dsn), "bogus")


def test_jobs_show_unknown_id_is_one_line(dsn: str) -> None:
    assert_one_line_error(pgq("jobs", "show", "424242", "--dsn", dsn), "424242")


def test_jobs_show_non_numeric_id_is_a_usage_error(dsn: str) -> None:
    result = pgq("jobs", "show", "abc", "--dsn", dsn)
    assert result.returncode == 2 and "Usage:" in result.stderr


def test_jobs_cancel(dsn: str) -> None:
    job = enqueue(dsn, "add", "--args", "[1, 2]", "--run-in", "1h")
    cancelled = json_of("jobs", "cancel", str(job["id"]), "--dsn", dsn)
    assert cancelled["status"] == "cancelled"
    human = ok("jobs", "cancel", str(job["id"]), "--dsn", dsn).stdout
    assert human.strip() == f"Nothing to cancel: job {job['id']}: add on queue 'default' " \
                            "(cancelled)", human
    other = enqueue(dsn, "add", "--args", "[1, 2]", "--run-in", "1h")
    human = ok("jobs", "cancel", str(other["id"]), "--dsn", dsn).stdout
    assert human.strip() == f"Cancelled job {other['id']}: add on queue 'default'", human
    assert_one_line_error(pgq("jobs", "cancel", "424242", "--dsn", dsn), "424242")


# -- dead jobs -------------------------------------------------------------------------


def test_dead_list_retry_and_purge(dsn: str) -> None:
    keyed = enqueue(dsn, "doomed", "--idempotency-key", "k1", "--queue", "mail")
    plain = enqueue(dsn, "doomed", "--queue", "mail")
    other = enqueue(dsn, "doomed", "--queue", "other")
    run_burst_worker(dsn)

    dead = json_of("dead", "list", "--dsn", dsn)
    assert {job["id"] for job in dead} == {keyed["id"], plain["id"], other["id"]}
    assert all(set(job) >= JOB_KEYS and job["status"] == "dead" for job in dead)
    assert {job["id"] for job in json_of("dead", "list", "--queue", "other", "--dsn", dsn)} == {
        other["id"]
    }
    assert "doomed on purpose" in ok("dead", "list", "--dsn", dsn).stdout

    # A newer live job holds k1: retrying the dead one is refused, one line, exit 1.
    holder = enqueue(dsn, "add", "--args", "[1, 1]", "--idempotency-key", "k1")
    assert holder["id"] != keyed["id"]
    refused = pgq("dead", "retry", str(keyed["id"]), "--dsn", dsn)
    assert_one_line_error(refused, str(keyed["id"]), "idempotency key")
    assert json_of("jobs", "show", str(keyed["id"]), "--dsn", dsn)["status"] == "dead"

    retried = ok("dead", "retry", str(plain["id"]), "--dsn", dsn)
    assert str(plain["id"]) in retried.stdout
    revived = json_of("jobs", "show", str(plain["id"]), "--dsn", dsn)
    assert (revived["status"], revived["attempts"]) == ("queued", 0)

    assert_one_line_error(pgq("dead", "retry", "424242", "--dsn", dsn), "424242",
                          "no dead job with this id")
    missing = pgq("dead", "retry", "424242", "--json", "--dsn", dsn)
    assert json.loads(missing.stdout) == {
        "retried": [], "refused": [{"id": 424242, "reason": "no dead job with this id"}]}
    assert_one_line_error(missing, "424242")

    # --all reports the refused job but is not an error; --queue narrows it.
    outcome = json_of("dead", "retry", "--all", "--queue", "mail", "--dsn", dsn)
    assert outcome["retried"] == []
    assert [item["id"] for item in outcome["refused"]] == [keyed["id"]]
    usage = pgq("dead", "retry", "--dsn", dsn)
    assert usage.returncode == 2

    # Purge: nothing is a week old; everything is older than zero seconds.
    assert json_of("dead", "purge", "--older-than", "7d", "--dsn", dsn) == {"purged": 0}
    assert json_of(
        "dead", "purge", "--older-than", "0", "--queue", "other", "--dsn", dsn
    ) == {"purged": 1}
    purged = ok("dead", "purge", "--older-than", "0s", "--dsn", dsn)
    assert "Purged 1 dead job" in purged.stdout
    assert json_of("dead", "list", "--dsn", dsn) == []
    assert_one_line_error(
        pgq("dead", "purge", "--older-than", "a week", "--dsn", dsn), "a week"
    )


# -- stats -----------------------------------------------------------------------------


def test_stats_json_shape(dsn: str) -> None:
    enqueue(dsn, "add", "--args", "[1, 2]", "--queue", "q1")
    enqueue(dsn, "add", "--args", "[1, 2]", "--queue", "q1", "--run-in", "1h")
    enqueue(dsn, "doomed", "--queue", "q2")
    ok("worker", "-A", APP, "--dsn", dsn, "--burst", "--queues", "q2")
    rows = {row["queue"]: row for row in json_of("stats", "--dsn", dsn)}
    assert set(rows) == {"q1", "q2"}
    assert all(set(row) >= STATS_KEYS for row in rows.values())
    assert (rows["q1"]["queued"], rows["q1"]["scheduled"]) == (1, 1)
    assert rows["q1"]["oldest_queued_age_seconds"] >= 0
    assert (rows["q2"]["dead"], rows["q2"]["queued"]) == (1, 0)
    human = ok("stats", "--dsn", dsn).stdout
    assert "q1" in human and "oldest queued" in human


# -- demo ------------------------------------------------------------------------------


def check_demo_summary(summary: dict[str, Any], jobs: int) -> None:
    assert summary["jobs"] == jobs
    assert summary["unfinished"] == 0
    assert summary["succeeded"] + summary["dead"] == jobs
    assert summary["dead"] >= 1
    assert summary["retried"] > summary["dead"]  # the flaky ones, and the doomed ones
    assert summary["jobs_per_second"] > 0


def test_demo_with_dsn(dsn: str) -> None:
    summary = json_of("demo", "--jobs", "300", "--dsn", dsn)
    check_demo_summary(summary, 300)
    assert summary["queue"] == "demo"
    # A second run uses a fresh queue, so its counts are its own.
    check_demo_summary(json_of("demo", "--jobs", "300", "--dsn", dsn), 300)


def test_demo_runs_even_after_its_queue_was_paused_or_bounded(dsn: str) -> None:
    ok("queues", "pause", "demo", "--dsn", dsn)
    ok("queues", "set", "demo", "--max-queued", "10", "--concurrency", "1", "--rate", "1/h",
       "--dsn", dsn)
    result = ok("demo", "--jobs", "300", "--dsn", dsn)
    assert "reset queue 'demo' to its defaults (it was paused" in result.stdout
    assert "pgqueue demo: summary" in result.stdout
    (demo,) = json_of("queues", "list", "--dsn", dsn)
    assert (demo["paused"], demo["settings"]) == (False, {
        "max_queued": None, "priority_aging": None, "concurrency": None,
        "key_concurrency": None, "rate_limit": None, "fair": False})
    # A queue with the defaults is left alone: no reset the second time.
    assert "reset queue" not in ok("demo", "--jobs", "50", "--dsn", dsn).stdout


def test_demo_embedded_in_a_fresh_directory(workdir: Path) -> None:
    result = ok("demo", "--jobs", "300", "--embedded", "--concurrency", "8", cwd=workdir)
    assert (workdir / ".pgqueue").is_dir()
    out = result.stdout
    assert "Created schema 'pgqueue' at revision" in out, out  # not "is up to date"
    assert "pgqueue demo: summary" in out
    for label in ("Jobs", "Succeeded", "Retried", "Dead", "Elapsed", "Throughput"):
        assert re.search(rf"^{label}\s", out, re.MULTILINE), (label, out)
    assert re.search(r"^Jobs\s+300\b", out, re.MULTILINE), out


def test_demo_uses_the_embedded_server_even_when_a_dsn_is_in_the_environment(
    workdir: Path, dsn: str
) -> None:
    # Issue 18.1: PGQUEUE_DSN/DATABASE_URL usually name the application's database; the
    # demo created its schema and queues there. Only --dsn on its command line counts.
    env = clean_environment()
    env["PGQUEUE_DSN"] = env["DATABASE_URL"] = dsn
    result = ok("demo", "--jobs", "50", cwd=workdir, env=env)
    assert "PGQUEUE_DSN and DATABASE_URL set but not used" in result.stdout, result.stdout
    assert "on embedded PostgreSQL in" in result.stdout, result.stdout
    assert (workdir / ".pgqueue").is_dir()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE queue LIKE 'demo-%'").fetchone()
    assert row == (0,)


def test_human_output_is_not_json(dsn: str) -> None:
    enqueue(dsn, "add", "--args", "[1, 2]")
    for command in (["stats"], ["jobs", "list"], ["dead", "list"], ["workers"]):
        out = ok(*command, "--dsn", dsn).stdout
        with pytest.raises(json.JSONDecodeError):
            json.loads(out)



def test_worker_numbers_out_of_range_are_usage_errors_like_non_numbers(dsn: str) -> None:
    # Issue 18.13: -1 used to exit 1 naming the internal setting, "abc" exit 2.
    for value in ("-1", "0", "abc", "10001"):
        result = pgq("worker", "-A", APP, "--dsn", dsn, "--concurrency", value)
        assert result.returncode == 2, (value, result.stderr)
        assert "Usage:" in result.stderr and "--concurrency" in result.stderr, result.stderr
    result = pgq("worker", "-A", APP, "--dsn", dsn, "--prefetch", "-1")
    assert result.returncode == 2 and "--prefetch" in result.stderr, result.stderr


def test_dead_retry_says_what_is_missing(dsn: str) -> None:
    none = pgq("dead", "retry", "--dsn", dsn)
    assert none.returncode == 2
    assert "name the dead jobs to retry, or give --all" in none.stderr, none.stderr
    both = pgq("dead", "retry", "1", "--all", "--dsn", dsn)
    assert both.returncode == 2 and "not both" in both.stderr, both.stderr


def test_lists_say_when_more_rows_exist_and_clip_long_errors(dsn: str) -> None:
    # Issue 18.13: 50 of 400 dead jobs were shown with no word about the rest, in rows
    # 250 columns wide.
    long_error = "boom " * 100
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgqueue.dead_jobs (id, queue, task, args, kwargs, priority, run_at, "
            "attempts, max_attempts, created_at, error) SELECT n, 'big', 'add', '[]', '{}', 0, "
            "now(), 1, 1, now(), %s FROM generate_series(900001, 900003) AS n",
            (long_error,))
    out = ok("dead", "list", "--queue", "big", "--limit", "2", "--dsn", dsn).stdout
    lines = out.splitlines()
    assert lines[-1] == ("(the first 2 dead jobs; more exist: raise --limit or narrow with "
                         "--queue)"), out
    assert max(len(line) for line in lines[:-1]) < 140, out
    assert "…" in out
    everything = ok("dead", "list", "--queue", "big", "--limit", "3", "--dsn", dsn).stdout
    assert "more exist" not in everything
    assert len(json_of("dead", "list", "--queue", "big", "--limit", "2", "--dsn", dsn)) == 2


def test_enqueue_with_app_refuses_unknown_tasks_and_applies_a_short_names_options(
    dsn: str,
) -> None:
    # Issue 18.5: with -A an unknown name was enqueued (and died in the worker), and a
    # task's short name landed on 'default' instead of the task's queue.
    assert_one_line_error(pgq("enqueue", "ad", "--args", "[1, 2]", "-A", APP, "--dsn", dsn),
                          "no task 'ad'", "did you mean 'add'?")
    assert_one_line_error(pgq("enqueue", "nothing_like_it", "-A", APP, "--dsn", dsn),
                          "registered: add, async_echo, doomed, reports.build")
    job = json_of("enqueue", "build", "--args", "[7]", "-A", APP, "--dsn", dsn)
    assert (job["task"], job["queue"], job["priority"]) == ("reports.build", "reports", 3)


def test_worker_json_logs_with_a_line_per_succeeded_job(dsn: str) -> None:
    # Issue 18.12: no line per succeeded job at the default level; structured extras.
    ok_job = enqueue(dsn, "add", "--args", "[1, 2]")
    dead_job = enqueue(dsn, "doomed", "--args", '["line one\\nforged line"]')
    result = ok("worker", "-A", APP, "--dsn", dsn, "--burst", "--log-format", "json",
                "--log-succeeded")
    records = [json.loads(line) for line in result.stderr.splitlines()]
    by_job = {record.get("job_id"): record for record in records if "job_id" in record}
    succeeded = by_job[ok_job["id"]]
    assert (succeeded["level"], succeeded["task"], succeeded["queue"]) == (
        "INFO", "add", "default")
    assert succeeded["message"].startswith(f"Job {ok_job['id']} (add) succeeded in ")
    assert succeeded["duration_ms"] >= 0
    assert by_job[dead_job["id"]]["level"] == "ERROR"
    quiet = enqueue(dsn, "add", "--args", "[3, 4]")
    text = ok("worker", "-A", APP, "--dsn", dsn, "--burst").stderr
    assert f"Job {quiet['id']} " not in text, text  # succeeded lines are opt-in


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_the_demo_stops_the_worker_and_empties_its_queue(dsn: str) -> None:
    # Issue 18.11: Ctrl-C left the worker's row "alive" and thousands of demo jobs queued,
    # and every run added a queue to pgq stats.
    # As from a terminal: SIGINT at its default disposition. A test run started in the
    # background of a non-interactive shell (`bash .ci/run &`, nohup) inherits SIGINT
    # ignored, and so would the demo, which would then never see the Ctrl-C.
    demo = subprocess.Popen(
        [pgq_executable(), "demo", "--jobs", "200000", "--dsn", dsn], cwd=REPO,
        env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint)
    try:
        def succeeded() -> int:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'demo' "
                                   "AND status = 'succeeded'").fetchone()
            return int(row[0]) if row else 0

        wait_until(lambda: succeeded() > 100, timeout=60, message="the demo at work")
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, (out, err)
    assert "Stopped; removed the demo's" in out, out
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.workers").fetchone() == (0,)
        left = conn.execute("SELECT status, count(*) FROM pgqueue.jobs WHERE queue = 'demo' "
                            "GROUP BY 1").fetchall()
        assert left == [], (left, out, err)
    again = json_of("demo", "--jobs", "50", "--dsn", dsn)
    check_demo_summary(again, 50)
    assert [row["queue"] for row in json_of("stats", "--dsn", dsn)] == ["demo"]


def test_usage_lines_name_required_arguments_without_braces() -> None:
    # Issue 18.13: typer wrote "pgq jobs show [OPTIONS] {ID}".
    assert ok("jobs", "show", "--help").stdout.splitlines()[0].rstrip().endswith(
        "pgq jobs show [OPTIONS] ID")
    assert "pgq dead retry [OPTIONS] [ID]..." in ok("dead", "retry", "--help").stdout
