"""The SQL and Python examples of docs/quickstart.md, docs/reference/schema.md,
docs/guides/queues.md, docs/guides/workflows.md, docs/guides/periodic.md and
docs/guides/steps.md run.

A reader copies them; they must work as printed. Every ```sql and ```python block is
executed, in order, against a migrated database (the quickstart's DSN
``postgresql://app@localhost:5432/app`` is replaced by the test's). A block preceded by
``<!-- not executed: reason -->`` is skipped and must say why. The quickstart's task
module is written to ``myapp/tasks.py`` as the quickstart says, and a real ``pgq worker``
runs what the examples enqueue: every job must succeed (the SQL insert example once
made a dead job against the quickstart's ``user_id: int`` task).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests._database import as_url
from tests.e2e._pgq import clean_environment, pgq_executable
from tests.integration._worker_helpers import row

DOCS = Path(__file__).resolve().parents[2] / "docs"
QUICKSTART_DSN = "postgresql://app@localhost:5432/app"
FENCE = re.compile(r"(?P<marker><!-- not executed: [^>]+-->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```",
                   re.DOTALL)


def blocks(page: Path, *languages: str) -> list[str]:
    """The code of the page's blocks in ``languages``, in order, unmarked ones only."""
    found = []
    for match in FENCE.finditer(page.read_text(encoding="utf-8")):
        if match["lang"] in languages and not match["marker"]:
            found.append(match["code"])
    return found


def test_every_skipped_block_says_why() -> None:
    for page in (DOCS / "quickstart.md", DOCS / "reference" / "schema.md",
                 DOCS / "guides" / "queues.md", DOCS / "guides" / "workflows.md",
                 DOCS / "guides" / "periodic.md", DOCS / "guides" / "steps.md"):
        for marker in re.findall(r"<!-- not executed:([^>]*)-->", page.read_text()):
            assert len(marker.strip()) > 10, (page, marker)


@pytest.fixture
def app_dir(tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``myapp/tasks.py`` from the quickstart's first Python block, importable, with
    PGQUEUE_DSN pointing at the test database."""
    tasks = blocks(DOCS / "quickstart.md", "python")[0]
    assert "q = Queue()" in tasks and "def send_welcome_email" in tasks
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(tasks)
    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield tmp_path
    finally:
        module = sys.modules.pop("myapp.tasks", None)
        sys.modules.pop("myapp", None)
        if module is not None:
            module.q.close()


@contextlib.contextmanager
def worker(app_dir: Path, dsn: str) -> Iterator[subprocess.Popen[str]]:
    """``pgq worker -A myapp.tasks:q``, as the quickstart runs it; SIGTERM at the end."""
    env = clean_environment() | {"PGQUEUE_DSN": dsn}
    process = subprocess.Popen(
        [pgq_executable(), "worker", "-A", "myapp.tasks:q", "--concurrency", "4"],
        cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        assert process.returncode == 0, output


def _localised(code: str, dsn: str) -> str:
    url = as_url(dsn)
    return code.replace("postgresql+psycopg://app@localhost:5432/app",
                        url.replace("postgresql://", "postgresql+psycopg://", 1)) \
        .replace(QUICKSTART_DSN, url)


def _run_python(code: str, dsn: str) -> dict[str, Any]:
    namespace = _run_python_in(code, dsn, {})
    with contextlib.redirect_stdout(io.StringIO()):
        if "sign_up" in namespace:  # the async example defines its coroutine only
            asyncio.run(namespace["sign_up"]("grace@example.com"))
            asyncio.run(namespace["async_engine"].dispose())
        for engine in ("engine", "async_engine"):
            if engine == "engine" and engine in namespace:
                namespace[engine].dispose()
    return namespace


def _run_sql(code: str, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(code.encode())


def test_quickstart_examples_run_and_their_jobs_succeed(app_dir: Path, dsn: str) -> None:
    _run_sql("CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL)", dsn)
    python = blocks(DOCS / "quickstart.md", "python")
    *examples, waiting = python[1:]
    assert "job.wait(timeout=30)" in waiting
    for code in examples:
        _run_python(code, dsn)
    with worker(app_dir, dsn):
        done = _run_python(waiting, dsn)
        assert done["result"] == {"sent_to": "ada@example.com"}
        for code in blocks(DOCS / "quickstart.md", "sql"):
            _run_sql(code, dsn)
        _wait_until_nothing_is_ready(dsn)
    with psycopg.connect(dsn) as conn:
        dead = conn.execute("SELECT task, error FROM pgqueue.dead_jobs").fetchall()
        statuses: dict[str, int] = dict(conn.execute(
            "SELECT status, count(*) FROM pgqueue.jobs WHERE run_at <= now() GROUP BY 1"))
        users = conn.execute("SELECT count(*) FROM users").fetchone()
    assert dead == []
    assert set(statuses) == {"succeeded"}, statuses
    assert users == (3,)  # psycopg, SQLAlchemy and AsyncSession examples


def test_schema_reference_examples_run_and_the_sql_insert_succeeds(
    app_dir: Path, dsn: str
) -> None:
    from myapp.tasks import send_welcome_email  # type: ignore[import-not-found]

    job = send_welcome_email.enqueue(1, "ada@example.com")
    examples = blocks(DOCS / "reference" / "schema.md", "sql")
    inserts = [code for code in examples if code.lstrip().startswith("INSERT")]
    assert len(inserts) == 1
    for code in examples:
        _run_sql(code.replace("WHERE id = 42", f"WHERE id = {job.id}"), dsn)
    with worker(app_dir, dsn):
        _wait_until_nothing_is_ready(dsn)
    with psycopg.connect(dsn) as conn:
        inserted = conn.execute(
            "SELECT status, kwargs, result FROM pgqueue.jobs WHERE id <> %s", (job.id,)
        ).fetchall()
        dead = conn.execute("SELECT error FROM pgqueue.dead_jobs").fetchall()
    assert dead == []
    assert inserted == [("succeeded", {"user_id": 1, "email": "ada@example.com"},
                         {"sent_to": "ada@example.com"})]
    assert row(dsn, job.id) is not None


def _wait_until_nothing_is_ready(dsn: str) -> None:
    from tests._polling import wait_until

    def drained() -> bool:
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pgqueue.jobs WHERE run_at <= now() "
                "AND status IN ('queued', 'running')").fetchone()
        return found == (0,)

    wait_until(drained, timeout=60, message="the worker to run every ready job")


@contextlib.contextmanager
def guide(name: str, dsn: str, *, sql: bool = True) -> Iterator[dict[str, Any]]:
    """Run the Python blocks of docs/guides/<name>.md in order, in one namespace (the
    blocks build on each other), then its SQL blocks unless ``sql`` is False; yield the
    namespace, and close the guide's Queue ``q`` at the end."""
    page = DOCS / "guides" / f"{name}.md"
    namespace: dict[str, Any] = {}
    try:
        for code in blocks(page, "python"):
            namespace = _run_python_in(code, dsn, namespace)
        if sql:
            run_sql_blocks(name, dsn)
        yield namespace
    finally:
        if "q" in namespace:
            namespace["q"].close()


def run_sql_blocks(name: str, dsn: str) -> None:
    """Run the SQL blocks of docs/guides/<name>.md in order."""
    for code in blocks(DOCS / "guides" / f"{name}.md", "sql"):
        _run_sql(code, dsn)


def test_queues_guide_examples_run(dsn: str) -> None:
    with guide("queues", dsn) as namespace:
        queues = {info.name: info for info in namespace["q"].queues()}
    assert queues["email"].max_queued == 10_000 and not queues["email"].paused
    assert queues["email"].counts["queued"] == 4  # users 1, 3 and 4, and 5 from SQL
    assert queues["email"].counts["scheduled"] == 1  # 6, from SQL, due in 10 minutes
    assert queues["email-bulk"].counts["queued"] == 1
    assert queues["reports"].paused and queues["reports"].priority_aging == 30


def test_periodic_guide_examples_run(dsn: str) -> None:
    """The guide's blocks in order; then a worker of its Queue declares the code schedules,
    which the list shows next to the run-time one."""
    from pgqueue.worker import BackgroundWorker, WorkerSettings
    from tests._polling import wait_until

    with guide("periodic", dsn) as namespace:
        q = namespace["q"]
        assert "resize" not in q.periodic_tasks  # refused at decoration
        with BackgroundWorker(q, WorkerSettings(concurrency=1)):
            wait_until(lambda: len(q.schedules()) == 3, timeout=15,
                       message="the worker to declare its code schedules")
        found = {info.name: info for info in q.schedules()}
    assert {name: (i.source, i.state) for name, i in found.items()} == {
        "morning_digest": ("code", "active"), "refresh_rates": ("code", "active"),
        "nightly-report": ("runtime", "active")}
    assert found["morning_digest"].tz == "Europe/Paris"
    assert (found["nightly-report"].args, found["nightly-report"].kwargs) == \
        (["sales"], {"pages": 3})


def test_workflows_guide_examples_run(dsn: str) -> None:
    """The guide's examples assert their own results (a burst worker runs them in
    between); afterwards every step of every workflow succeeded."""
    with guide("workflows", dsn):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        statuses: dict[str, int] = dict(conn.execute(
            "SELECT status, count(*) FROM pgqueue.jobs GROUP BY status").fetchall())
        dead = conn.execute("SELECT count(*) FROM pgqueue.dead_jobs").fetchone()
        workflows = conn.execute("SELECT count(*) FROM pgqueue.workflows").fetchone()
    assert dead == (0,) and set(statuses) == {"succeeded"}, statuses
    assert workflows == (6,)  # chain, group, chord, nested chain, diamond, crawl


def test_steps_guide_examples_run(dsn: str) -> None:
    """docs/guides/steps.md: the checkout charges once over two attempts, the async task
    imports, and the step inside ctx.transaction() is recorded with it."""
    from pgqueue.worker import BackgroundWorker

    with guide("steps", dsn, sql=False) as namespace:
        assert namespace["charges"] == ["order 42: 1999"]
        assert namespace["job"].attempts == 2
        assert namespace["job"].result == "receipt for ch_42"
        assert namespace["imported"] == 3
        with BackgroundWorker(namespace["q"]):
            reserved = namespace["reserve_stock"].enqueue(7).wait(timeout=30)
        assert reserved == "r-7"
        run_sql_blocks("steps", dsn)
        with psycopg.connect(dsn) as conn:
            steps = conn.execute("SELECT name, result FROM pgqueue.job_steps ORDER BY job_id, "
                                 "created_at, name").fetchall()
    assert steps == [("charge-card", {"charge_id": "ch_42", "cents": 1999}),
                     ("send-receipt", "receipt for ch_42"), ("download", [1, 2, 3]),
                     ("store", 3), ("reserve", "r-7")]


def test_limits_guide_examples_run(dsn: str) -> None:
    """docs/guides/limits.md: its limits are stored where the page says, and a worker of
    its Queue declares the task limits and runs every job it enqueued."""
    from pgqueue.worker import BackgroundWorker, WorkerSettings
    from tests._polling import wait_until

    with guide("limits", dsn) as namespace:
        q = namespace["q"]
        queues = {info.name: info for info in q.queues()}
        assert queues["default"].concurrency == 20
        assert queues["email"].rate_limit == "100/m"
        assert queues["llm"].rate_limit == "90000 tokens/m"
        assert queues["imports"].fair
        with BackgroundWorker(q, WorkerSettings(concurrency=4)):
            wait_until(lambda: all(info.counts["succeeded"] == sum(info.counts.values())
                                   for info in q.queues() if sum(info.counts.values())),
                       timeout=30, message="every job of the guide to succeed")
        tasks, pauses = q.limits()
    assert {name: lim.to_dict() for name, lim in tasks.items()} == {
        "build_report": {"global_concurrency": 2, "key_concurrency": None, "rate_limit": None},
        "call_partner_api": {"global_concurrency": None, "key_concurrency": None,
                             "rate_limit": "10/s"},
        "export_tenant": {"global_concurrency": None, "key_concurrency": 1, "rate_limit": None},
    }
    assert pauses == []


def _run_python_in(code: str, dsn: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run one block of a page whose blocks build on each other (one namespace)."""
    namespace.setdefault("__name__", "docs_example")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_localised(code, dsn), "<docs example>", "exec"), namespace)
    return namespace
