"""``pgq worker --metrics-port``: a real worker process scraped over HTTP (urllib).

``/metrics`` counts the outcomes the worker recorded, by queue, task and outcome;
``/healthz`` answers 200 while the worker runs, 503 while it cannot reach the database at
start-up and while it drains after SIGTERM.
"""

from __future__ import annotations

import re
import signal
import urllib.error
import urllib.request

from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, scalar
from tests.e2e._pgq import UNREACHABLE_DSN


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the Prometheus text ``text``."""
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and match[1] == name:
            found = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
            if found == labels:
                return float(match[3])
    return None


def test_metrics_and_health_of_a_running_worker(chaos_dsn: str, processes: Processes) -> None:
    worker = processes.start_worker(chaos_dsn, extra=["--metrics-port", "0"],
                                    shutdown_timeout=20)
    port = int(worker.wait_for_log(r"Metrics on http://127\.0\.0\.1:(\d+)/metrics")[1])
    status, body = _get(port, "/healthz")
    assert status == 200, body
    assert '"status": "ok"' in body

    with chaos_app(chaos_dsn) as app:
        for n in range(5):
            app.noop.enqueue(n)
        app.exit_async.enqueue(3)  # max_attempts=1: dead

        def scraped() -> str | None:
            text = _get(port, "/metrics")[1]
            done = _sample(text, "pgqueue_jobs_processed_total", queue="default",
                           task="chaos.noop", outcome="succeeded")
            dead = _sample(text, "pgqueue_jobs_processed_total", queue="default",
                           task="chaos.exit", outcome="dead")
            return text if (done, dead) == (5, 1) else None

        text = wait_until(scraped, timeout=20,
                          message="5 succeeded and 1 dead in /metrics") or ""
        assert _sample(text, "pgqueue_job_duration_seconds_count", queue="default",
                       task="chaos.noop") == 5
        assert (_sample(text, "pgqueue_claim_latency_seconds_count", queue="default") or 0) >= 6
        assert _sample(text, "pgqueue_jobs_running") == 0

        # Draining: SIGTERM while a job runs; healthz says 503 until the process ends.
        held = app.hold.enqueue(3.0).id
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM chaos_runs "
                                             "WHERE job_id = %s", (held,)),
                   timeout=20, message="the held job started")
        assert _sample(_get(port, "/metrics")[1], "pgqueue_jobs_running") == 1
        worker.signal(signal.SIGTERM)

        def draining() -> str | None:
            status, body = _get(port, "/healthz")
            return body if status == 503 else None

        body = wait_until(draining, timeout=10, message="healthz 503 while draining") or ""
        assert '"draining": true' in body
        assert worker.wait(30) == 0


def test_health_is_503_while_the_database_is_out_of_reach(processes: Processes) -> None:
    worker = processes.start_worker(UNREACHABLE_DSN, wait_registered=False,
                                    extra=["--metrics-port", "0", "--connect-timeout", "60"])
    port = int(worker.wait_for_log(r"Metrics on http://127\.0\.0\.1:(\d+)/metrics")[1])
    status, body = _get(port, "/healthz")
    assert status == 503, body
    assert "starting: not connected to the database" in body
    worker.signal(signal.SIGKILL)
