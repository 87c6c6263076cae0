"""The django.tasks backend against a real Django project (tests/integration/
django_project) on the real database: enqueue in Django's transaction, results mapped
from pgqueue's states, jobs run by drain and by a real ``pgq worker --burst``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgqueue.testing import assert_enqueued, assert_not_enqueued, drain
from tests.e2e._pgq import clean_environment, pgq_executable

SETTINGS = "tests.integration.django_project.settings"


@pytest.fixture(scope="module")
def django_setup() -> None:
    """Django configured once per process from the test project's settings module (not
    DJANGO_SETTINGS_MODULE: the environment is inherited by other tests' processes)."""
    import django
    from django.conf import settings

    if not settings.configured:
        import importlib

        project = importlib.import_module(SETTINGS)
        settings.configure(**{name: getattr(project, name) for name in dir(project)
                              if name.isupper()})
        django.setup()


def point_django_at(dsn: str) -> None:
    """Django's default database becomes ``dsn``'s (as Django's test runner renames it
    to the test database), and is migrated: the shop app's tables and pgqueue's."""
    from django.core.management import call_command
    from django.db import connections

    params = conninfo_to_dict(dsn)
    connection = connections["default"]
    connection.close()
    connection.settings_dict.update(
        NAME=params["dbname"], USER=params.get("user", ""),
        PASSWORD=params.get("password", ""), HOST=params.get("host", ""),
        PORT=str(params.get("port", "")))
    call_command("migrate", verbosity=0)


@pytest.fixture
def shop(dsn: str, django_setup: None) -> Iterator[Any]:
    """The shop project on this test's database (pgqueue's tables already there: its
    Django migration finds them current); the shop's tasks module."""
    from django.db import connections

    from pgqueue.contrib.django.backend import close_queues
    from tests.integration.django_project.shop import tasks

    point_django_at(dsn)
    try:
        yield tasks
    finally:
        connections["default"].close()
        close_queues()


def pgqueue_task(django_task: Any) -> Any:
    """The pgqueue task a Django task's jobs are enqueued as."""
    return django_task.get_backend().queue.tasks[django_task.module_path]


def backend_queue() -> Any:
    from pgqueue.contrib.django.backend import backend_for

    return backend_for("default").queue


def test_enqueue_rolls_back_with_transaction_atomic(shop: Any) -> None:
    from django.db import connection, transaction

    from tests.integration.django_project.shop.models import Order

    with pytest.raises(RuntimeError), transaction.atomic():
        order = Order.objects.create(item="book")
        shop.fulfil_order.enqueue(order.id)
        # Inserted through Django's own connection, in the block's transaction: seen
        # there, not from pgqueue's connections.
        assert_enqueued(pgqueue_task(shop.fulfil_order), args=[order.id],
                        conn=connection.connection)
        assert_not_enqueued(pgqueue_task(shop.fulfil_order))
        raise RuntimeError("payment declined")
    assert Order.objects.count() == 0
    assert_not_enqueued(pgqueue_task(shop.fulfil_order))
    assert drain(backend_queue()) == []


def test_a_committed_job_runs_and_its_result_maps_to_django_statuses(shop: Any) -> None:
    from django.test import RequestFactory

    from tests.integration.django_project.shop.models import Order
    from tests.integration.django_project.shop.views import order_task, place_order

    response = place_order(RequestFactory().post("/orders", {"item": "book"}))
    assert response.status_code == 201
    placed = _json(response)
    result = shop.fulfil_order.get_result(placed["task"])
    assert (result.status, result.args, result.kwargs) == ("READY", [placed["order"]], {})
    assert result.task is shop.fulfil_order and result.backend == "default"
    assert result.enqueued_at is not None and not result.is_finished
    job = backend_queue().get_job(int(result.id))
    assert (job.task, job.args, job.queue) == (
        "tests.integration.django_project.shop.tasks.fulfil_order", [placed["order"]], "default")

    attempts = drain(backend_queue())
    assert [(a.outcome, a.result) for a in attempts] == [
        ("succeeded", f"order {placed['order']} fulfilled")]
    result.refresh()
    assert result.status == "SUCCESSFUL" and result.is_finished
    assert result.return_value == f"order {placed['order']} fulfilled"
    assert result.finished_at is not None and result.attempts == 1
    assert Order.objects.get(id=placed["order"]).status == "fulfilled"
    assert _json(order_task(RequestFactory().get("/"), placed["task"])) == {
        "status": "SUCCESSFUL", "value": f"order {placed['order']} fulfilled"}


def test_failures_retry_then_fail_with_the_exception_class(shop: Any) -> None:
    result = shop.send_receipt.enqueue(404)
    job = backend_queue().get_job(int(result.id))
    assert (job.queue, job.priority, job.max_attempts, job.timeout) == ("emails", 10, 2, 60)
    assert [a.outcome for a in drain(backend_queue())] == ["retrying"]
    retrying = backend_queue().get_job(int(result.id))
    assert retrying.status == "retrying"
    assert 50 < (retrying.run_at - datetime.now(UTC)).total_seconds() <= 60  # RETRY_INTERVALS
    result.refresh()
    assert result.status == "READY"  # waiting for its second attempt
    assert result.errors[0].exception_class is LookupError
    assert "no order 404" in result.errors[0].traceback
    later = datetime.now(UTC) + timedelta(hours=1)
    assert [a.outcome for a in drain(backend_queue(), now=later)] == ["dead"]
    result.refresh()
    assert result.status == "FAILED" and result.attempts == 2
    assert result.errors[-1].exception_class_path == "builtins.LookupError"
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_context_async_tasks_and_run_after(shop: Any) -> None:
    from tests.integration.django_project.shop.models import Order

    order = Order.objects.create(item="lamp")
    receipt = shop.send_receipt.enqueue(order_id=order.id)
    pong = shop.ping.enqueue("one")
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    deferred = shop.ping.using(run_after=tomorrow).enqueue("later")
    assert {a.result for a in drain(backend_queue())} == {1, "pong one"}
    receipt.refresh()
    pong.refresh()
    assert (receipt.return_value, pong.return_value) == (1, "pong one")  # attempt 1
    deferred.refresh()
    assert deferred.status == "READY"
    assert backend_queue().get_job(int(deferred.id)).status == "scheduled"
    assert [a.result for a in drain(backend_queue(), now=tomorrow)] == ["pong later"]


def test_unknown_result_ids_and_hostile_task_names(shop: Any) -> None:
    from pgqueue.contrib.django.tasks_api import TaskResultDoesNotExist

    for missing in ("999999", "not-a-number"):
        with pytest.raises(TaskResultDoesNotExist):
            shop.fulfil_order.get_result(missing)
    # A job naming a function rather than a Django task (a hand-inserted row): the worker
    # neither imports nor calls it; the job is dead.
    queue = backend_queue()
    job = queue.enqueue_by_name("os.system", args=["echo owned"])
    assert [(a.job_id, a.outcome) for a in drain(queue)] == [(job.id, "dead")]
    assert "unknown task 'os.system'" in (queue.get_job(job.id).error or "")
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        shop.fulfil_order.get_result(str(job.id))


def test_unknown_options_are_refused_with_the_accepted_ones(django_setup: None) -> None:
    from pgqueue import ConfigurationError
    from pgqueue.contrib.django import PgQueueBackend

    with pytest.raises(ConfigurationError, match=r"unknown option\(s\) MAX_ATTEMPT; "
                       r"accepted: DATABASE, DSN, MAX_ATTEMPTS"):
        PgQueueBackend("default", {"OPTIONS": {"MAX_ATTEMPT": 2}})
    with pytest.raises(ConfigurationError, match="invalid retry_intervals"):
        PgQueueBackend("default", {"OPTIONS": {"RETRY_INTERVALS": "60"}})


def test_a_task_the_worker_could_not_find_is_refused_at_enqueue(shop: Any) -> None:
    import sys
    import types

    from pgqueue import ConfigurationError

    module = types.ModuleType("renamed_tasks")
    exec("def work():\n    return 1\n", module.__dict__)
    module.renamed = shop.task(module.work)  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        # Its module path is renamed_tasks.work, which holds the plain function.
        with pytest.raises(ConfigurationError, match="not the module attribute"):
            module.renamed.enqueue()
    finally:
        del sys.modules[module.__name__]
    assert backend_queue().list_jobs() == []


def test_pgq_worker_burst_runs_django_tasks(shop: Any, dsn: str) -> None:
    from tests.integration.django_project.shop.models import Order

    order = Order.objects.create(item="chair")
    result = shop.fulfil_order.enqueue(order.id)
    env = clean_environment() | {"DJANGO_SETTINGS_MODULE": SETTINGS,
                                 "PGQUEUE_DJANGO_TEST_DSN": dsn}
    worker = subprocess.run(
        [pgq_executable(), "worker", "-A", "pgqueue.contrib.django.worker", "--burst"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert worker.returncode == 0, worker.stdout + worker.stderr
    result.refresh()
    assert result.status == "SUCCESSFUL", result.errors
    assert result.return_value == f"order {order.id} fulfilled"
    assert result.worker_ids[0].split(":")[0]  # the worker's id: host:pid:token
    order.refresh_from_db()
    assert order.status == "fulfilled"


def test_manage_py_migrate_creates_and_drops_pgqueues_tables(
    empty_dsn: str, django_setup: None,
) -> None:
    from django.core.management import call_command
    from django.db import connections

    from pgqueue.contrib.django.backend import close_queues
    from tests.integration.django_project.shop import tasks

    try:
        point_django_at(empty_dsn)  # an empty database, as Django's test runner makes
        result = tasks.ping.enqueue("fresh")
        assert [a.result for a in drain(backend_queue())] == ["pong fresh"]
        result.refresh()
        assert result.status == "SUCCESSFUL"
        close_queues()
        call_command("migrate", "pgqueue", "zero", verbosity=0)
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT to_regclass('pgqueue.jobs') IS NULL")
            assert cursor.fetchone() == (True,)
    finally:
        connections["default"].close()
        close_queues()


def _json(response: Any) -> Any:
    import json

    return json.loads(response.content)
