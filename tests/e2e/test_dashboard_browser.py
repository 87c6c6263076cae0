"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright) against a real ``pgq dashboard`` and a real ``pgq worker``.

One dashboard and one worker serve the whole module. The dashboard listens on 0.0.0.0
with a token, so every test goes through the login form, as an operator would.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from pgqueue import Queue
from tests._database import DatabaseFactory, DatabaseServer, TemplateCache
from tests._polling import wait_until
from tests.e2e._chaos import free_port
from tests.e2e._pgq import clean_environment, pgq, pgq_executable
from tests.integration.test_operations import make_dead

CHROMIUM = "/usr/bin/chromium"
APP = "tests.e2e.apps.dashboard_tasks:queue"
TOKEN = "browser-test-token"
# Generous for a loaded machine; a passing run waits far less.
UI_TIMEOUT = 20_000


@pytest.fixture(scope="module")
def module_dsn(database_server: DatabaseServer, templates: TemplateCache,
               session_token: str) -> Iterator[str]:
    """One migrated database for the module's dashboard and worker."""
    factory = DatabaseFactory(database_server, templates, session_token + "dash")
    try:
        yield factory.migrated()
    finally:
        factory.drop_all()


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([pgq_executable(), *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def dashboard(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``pgq dashboard --host 0.0.0.0`` with a token, and a worker; the base URL."""
    logs = tmp_path_factory.mktemp("dashboard")
    port = free_port()
    env = clean_environment() | {"PGQUEUE_DASHBOARD_TOKEN": TOKEN}
    server = _start(["dashboard", "--dsn", module_dsn, "--host", "0.0.0.0",
                     "--port", str(port), "--refresh", "0.5"], env, logs / "dashboard.log")
    worker = _start(["worker", "-A", APP, "--dsn", module_dsn, "--lease", "3",
                     "--poll-interval", "0.5"], clean_environment(), logs / "worker.log")
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert server.poll() is None, (logs / "dashboard.log").read_text()
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=30, message="the dashboard answers /healthz")
        yield base
    finally:
        _stop(worker)
        _stop(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, dashboard: str) -> Iterator[Page]:
    """A fresh browser profile (no cookies), logged in through the form."""
    context = browser.new_context(base_url=dashboard)
    context.set_default_timeout(UI_TIMEOUT)
    opened = context.new_page()
    opened.goto("/")
    expect(opened).to_have_url(f"{dashboard}/login?next=%2F")
    opened.fill("#token", TOKEN)
    opened.click("#login")
    expect(opened.locator("h1")).to_have_text("Overview")
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def queue(module_dsn: str) -> Iterator[Queue]:
    q = Queue(dsn=module_dsn)
    try:
        yield q
    finally:
        q.close()


def test_refused_without_the_token(browser: Browser, dashboard: str) -> None:
    context = browser.new_context(base_url=dashboard)
    try:
        opened = context.new_page()
        opened.goto("/jobs")
        expect(opened.locator("#token")).to_be_visible()  # the login form, not the jobs
        opened.fill("#token", "not-the-token")
        opened.click("#login")
        expect(opened.get_by_role("alert")).to_have_text("wrong token")
        assert opened.request.get("/api/stats").status == 401
    finally:
        context.close()
    no_token = {k: v for k, v in clean_environment().items() if k != "PGQUEUE_DASHBOARD_TOKEN"}
    refused = pgq("dashboard", "--dsn", "postgresql://x@127.0.0.1:1/x", "--host", "0.0.0.0",
                  "--port", str(free_port()), timeout=30, env=no_token)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "error: refusing to serve the dashboard on 0.0.0.0, a non-loopback address, without "
        "a token: set PGQUEUE_DASHBOARD_TOKEN, or listen on 127.0.0.1"
    ]


def test_the_default_is_loopback_and_open(module_dsn: str, tmp_path: Path) -> None:
    """``pgq dashboard`` with no --host and no token: 127.0.0.1, no login, and a request
    naming another host (DNS rebinding) refused."""
    port = free_port()
    no_token = {k: v for k, v in clean_environment().items() if k != "PGQUEUE_DASHBOARD_TOKEN"}
    server = _start(["dashboard", "--dsn", module_dsn, "--port", str(port)], no_token,
                    tmp_path / "dashboard.log")
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert server.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=30, message="the dashboard answers /healthz")
        assert httpx.get(f"{base}/api/stats").status_code == 200
        rebound = httpx.get(f"{base}/api/stats", headers={"Host": f"rebound.example:{port}"})
        assert rebound.status_code == 403
    finally:
        _stop(server)
    assert "pgqueue dashboard on http://127.0.0.1:" in (tmp_path / "dashboard.log").read_text()


def test_overview_shows_queues_and_the_worker(page: Page, queue: Queue) -> None:
    queue.enqueue_by_name("dash.add", args=[1, 2], queue="later", run_in=3600)
    row = page.locator('#queues tr[data-queue="later"]')
    expect(row).to_be_visible()  # arrived by the live refresh, without a reload
    expect(row.locator("td").nth(2)).to_have_text("1")  # scheduled
    expect(page.locator("#workers tbody tr")).to_have_count(1)
    expect(page.locator("#workers .badge")).to_have_text("alive")


def test_open_a_dead_job_retry_it_and_see_it_run(page: Page, queue: Queue,
                                                  module_dsn: str) -> None:
    job = queue.enqueue_by_name("dash.add", args=[20, 22], queue="dead-end", run_in=3600)
    make_dead(module_dsn, job.id, error="Traceback (most recent call last):\n"
                                        "RuntimeError: the mail server said no")
    page.click('a[href="/dead"]')
    page.click(f'#jobs a[href="/jobs/{job.id}"]')
    expect(page.locator("#status")).to_have_text("dead")
    expect(page.locator("#error")).to_contain_text("RuntimeError: the mail server said no")
    with psycopg.connect(module_dsn, autocommit=True) as conn:  # due now once retried
        conn.execute("UPDATE pgqueue.dead_jobs SET run_at = now() WHERE id = %s", (job.id,))
    page.click("#retry")
    expect(page.get_by_role("status")).to_have_text(f"dead job {job.id} queued again")
    expect(page.locator("#status")).to_have_text("succeeded")  # the worker ran it
    expect(page.locator("#result")).to_have_text("42")


def test_cancel_a_running_job(page: Page, queue: Queue) -> None:
    job = queue.enqueue_by_name("dash.long", args=[120])
    wait_until(lambda: queue.get_job(job.id).status == "running",  # type: ignore[union-attr]
               timeout=30, message="the worker runs the long job")
    page.goto(f"/jobs/{job.id}")
    expect(page.locator("#status")).to_have_text("running")
    page.click("#cancel")
    expect(page.get_by_role("status")).to_contain_text(f"cancellation of job {job.id} requested")
    expect(page.locator("#status")).to_have_text("cancelled")  # within a heartbeat (1 s)
    expect(page.locator("#cancel")).to_have_count(0)
