"""Every example in examples/ runs: the FastAPI and Flask apps through their test
clients, a real ``pgq worker --burst`` or ``drain`` for their jobs; the psycopg script
as a process; the deployment files are read and their shutdown timings checked."""

from __future__ import annotations

import asyncio
import configparser
import importlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from pgqueue.settings import parse_duration
from pgqueue.testing import assert_enqueued, drain
from tests._database import as_url
from tests.e2e._pgq import clean_environment, pgq_executable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEPLOY = EXAMPLES / "deploy"


def sqlalchemy_url(dsn: str) -> str:
    return as_url(dsn).replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def example(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``example("fastapi_orders")``: the module imported afresh, its DATABASE_URL this
    test's database (as a SQLAlchemy URL, which both SQLAlchemy and pgqueue take)."""
    monkeypatch.setenv("DATABASE_URL", sqlalchemy_url(dsn))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    imported: list[str] = []

    def load(name: str) -> ModuleType:
        sys.modules.pop(name, None)
        imported.append(name)
        return importlib.import_module(name)

    try:
        yield load
    finally:
        for name in imported:
            module = sys.modules.pop(name, None)
            if module is not None:
                module.q.close()
                engine = getattr(module, "engine", None)
                if engine is not None and hasattr(engine, "sync_engine"):
                    engine.sync_engine.dispose()
                elif engine is not None:
                    engine.dispose()


def run_burst_worker(app: str, dsn: str) -> str:
    """``pgq worker -A app --burst`` in examples/, as the examples' docstrings say."""
    env = clean_environment() | {"DATABASE_URL": sqlalchemy_url(dsn)}
    result = subprocess.run(
        [pgq_executable(), "worker", "-A", app, "--burst"], cwd=EXAMPLES, env=env,
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


async def test_fastapi_app_enqueues_in_the_request_transaction_and_reports_the_job(
    example: Any, dsn: str,
) -> None:
    import httpx

    shop = example("fastapi_orders")
    await shop.create_tables()  # what the app's lifespan does (ASGITransport runs none)
    transport = httpx.ASGITransport(app=shop.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            created = await client.post("/orders", json={"item": "book"})
            assert created.status_code == 201, created.text
            order_id, job_id = created.json()["order_id"], created.json()["job_id"]
            assert (await client.get(f"/jobs/{job_id}")).json()["status"] == "queued"

            refused = await client.post("/orders", json={"item": "unobtainium"})
            assert refused.status_code == 409
            # Rolled back with the request's transaction: only the first order's job.
            assert_enqueued(shop.fulfil_order, args=[order_id], count=1)
            assert_enqueued(shop.fulfil_order, count=1)

            await asyncio.to_thread(run_burst_worker, "fastapi_orders:q", dsn)

            status = (await client.get(f"/jobs/{job_id}")).json()
            assert status["status"] == "succeeded", status
            assert status["result"] == f"order {order_id} fulfilled"
            order = (await client.get(f"/orders/{order_id}")).json()
            assert order["status"] == "fulfilled"
            assert (await client.get("/jobs/999999")).status_code == 404
    finally:
        await shop.q.close_async()
        await shop.engine.dispose()


def test_flask_app_enqueues_with_a_session_and_drain_runs_the_job(example: Any) -> None:
    flask_orders = example("flask_orders")
    client = flask_orders.create_app().test_client()
    created = client.post("/signups", json={"email": "ada@example.com"})
    assert created.status_code == 201, created.text
    job_id = created.json["job_id"]
    assert client.post("/signups", json={"email": "ada@example.com"}).status_code == 409
    assert client.post("/signups", json={}).status_code == 400
    assert_enqueued(flask_orders.send_welcome_email, count=1,
                    args=[created.json["user_id"], "ada@example.com"])
    assert client.get(f"/jobs/{job_id}").json["status"] == "queued"

    attempts = drain(flask_orders.q)
    assert [(a.job_id, a.outcome) for a in attempts] == [(job_id, "succeeded")]

    status = client.get(f"/jobs/{job_id}").json
    assert status == {"id": job_id, "status": "succeeded",
                      "result": "welcome email sent to ada@example.com"}


def test_psycopg_script_runs_end_to_end(empty_dsn: str) -> None:
    """On an empty database: the script migrates, enqueues and runs the job itself."""
    env = clean_environment() | {"PGQUEUE_DSN": empty_dsn}
    result = subprocess.run([sys.executable, "psycopg_signup.py"], cwd=EXAMPLES, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "bob's signup rolled back (payment declined): no user, no job",
        "job 1: succeeded, result 'welcome, ada@example.com'",
        "jobs in total: 1",
    ]


# -- deployment files ---------------------------------------------------------------


def worker_options(command: list[str]) -> dict[str, str]:
    """``pgq worker`` options of a command line, by name (``-A`` as ``--app``)."""
    assert command[:2] == ["pgq", "worker"] or command[0].endswith("/pgq"), command
    options: dict[str, str] = {}
    words = command[2:]
    for flag, value in zip(words[::2], words[1::2], strict=True):
        options["--app" if flag == "-A" else flag] = value
    return options


def longest_task_timeout(app: str) -> float:
    """The longest timeout among the tasks of ``module:queue`` in examples/; every task
    must have one (without it, no shutdown timeout is long enough)."""
    module_name, _, attribute = app.partition(":")
    sys.path.insert(0, str(EXAMPLES))
    try:
        queue = getattr(importlib.import_module(module_name), attribute)
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop(module_name, None)
    timeouts: dict[str, float | None] = {
        name: task.options.timeout for name, task in queue.tasks.items()}
    assert timeouts and None not in timeouts.values(), timeouts
    return max(t for t in timeouts.values() if t is not None)


def test_compose_grace_period_outlasts_the_shutdown_timeout_and_every_task() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    worker = compose["services"]["worker"]
    options = worker_options(worker["command"])
    shutdown = parse_duration(options["--shutdown-timeout"], what="shutdown")
    grace = parse_duration(worker["stop_grace_period"], what="grace")
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert grace > shutdown > longest_task_timeout(options["--app"]), (grace, shutdown)
    # Every service that runs pgq reaches the same database, migrated before it starts.
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert compose["services"]["migrate"]["command"] == ["pgq", "migrate"]


def test_systemd_timeout_outlasts_the_shutdown_timeout_and_every_task() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "pgqueue-worker@.service").read_text())
    service = unit["Service"]
    command = shlex.split(service["ExecStart"])
    assert command[0].endswith("/pgq") and command[1] == "worker"
    options = worker_options(command)
    shutdown = parse_duration(options["--shutdown-timeout"], what="shutdown")
    stop = parse_duration(re.sub(r"\s+", "", service["TimeoutStopSec"]), what="stop")
    assert stop > shutdown > longest_task_timeout(options["--app"]), (stop, shutdown)
    # SIGTERM to the worker alone first (its threads finish their jobs), SIGKILL at the end.
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert service["Restart"] == "on-failure"


def test_deploy_files_run_the_same_worker() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    unit = configparser.ConfigParser(interpolation=None)
    unit.read_string((DEPLOY / "pgqueue-worker@.service").read_text())
    from_compose = worker_options(compose["services"]["worker"]["command"])
    from_systemd = worker_options(shlex.split(unit["Service"]["ExecStart"]))
    assert from_compose == from_systemd
