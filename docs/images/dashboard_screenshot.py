"""Make docs/images/dashboard-overview.png: the dashboard's overview, in headless Chromium.

    python docs/images/dashboard_screenshot.py postgresql://postgres@127.0.0.1:5432/dash_demo

The database must be an empty one (it is migrated here). The script enqueues the demo's
sample jobs on three queues, runs a real ``pgq worker`` on two of them (so some jobs
succeed, some retry and some die, and a worker is alive), then serves ``pgq dashboard``
and photographs it. Only the chart's history before the worker started is synthetic:
rows written into ``job_counts`` for the past hour, so that the chart has an hour to show.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
from playwright.sync_api import sync_playwright

from cli.demo_tasks import checksum, doomed, flaky, ping, queue

HERE = Path(__file__).parent
PGQ = str(Path(sys.executable).with_name("pgq"))
PORT = 8799


def main(dsn: str) -> None:
    subprocess.run([PGQ, "migrate", "--dsn", dsn], check=True, capture_output=True)
    queue.configure(dsn=dsn)
    ping.using(queue="default").enqueue_many([(i,) for i in range(1800)])
    for i in range(12):
        flaky.using(queue="email").enqueue(i)
    for i in range(4):
        doomed.using(queue="email").enqueue(i)
    checksum.using(queue="reports").enqueue_many([(i,) for i in range(40)])
    checksum.using(queue="reports", run_in=timedelta(minutes=20)).enqueue_many(
        [(i,) for i in range(60)])
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for minute in range(1, 60):
            for name, base in (("default", 140), ("email", 25), ("reports", 50)):
                ok = max(0, int(base + 40 * rng.random() - 20 + (minute % 17)))
                conn.execute(
                    "INSERT INTO pgqueue.job_counts VALUES (date_trunc('minute', now()) - "
                    "make_interval(mins => %s), %s, 'sample', %s, 'history', %s)",
                    (minute, name, "succeeded", ok))
                if rng.random() < 0.25:
                    conn.execute(
                        "INSERT INTO pgqueue.job_counts VALUES (date_trunc('minute', now()) - "
                        "make_interval(mins => %s), %s, 'sample', 'failed', 'history', %s)",
                        (minute, name, rng.randint(1, 9)))
    worker = subprocess.Popen([PGQ, "worker", "-A", "cli.demo_tasks:queue", "--dsn", dsn,
                               "--queues", "email,reports", "--concurrency", "4"])
    dashboard = subprocess.Popen([PGQ, "dashboard", "--dsn", dsn, "--port", str(PORT)])
    try:
        time.sleep(13)  # the worker runs what is ready and reports its counts (heartbeat)
        base = f"http://127.0.0.1:{PORT}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                 args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            page.goto(base)
            page.screenshot(path=str(HERE / "dashboard-overview.png"), full_page=True)
            browser.close()
    finally:
        dashboard.terminate()
        worker.terminate()
        dashboard.wait()
        worker.wait()


if __name__ == "__main__":
    main(sys.argv[1])
