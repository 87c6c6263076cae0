"""The dashboard's JSON API, pages, /metrics, /healthz and access rules, in process
(Starlette's TestClient) against a real database.

The API's objects must be exactly the CLI's (``to_dict()`` of the same results); lists
page with a keyset cursor; unknown ids are 404, bad filters 400/422 with one line; with a
token nothing but /healthz and the login form answers without it; writes are CSRF-safe.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from pgqueue import Queue, chain
from pgqueue.cli.app import app
from pgqueue.dashboard import Access, create_app
from pgqueue.dashboard.security import CSRF_COOKIE, SESSION_COOKIE
from pgqueue.db.queries import for_schema
from tests._polling import wait_until
from tests.integration.test_operations import execute, make_dead

TOKEN = "s3cret-token"


@pytest.fixture
def client(q: Queue) -> Iterator[TestClient]:
    with TestClient(create_app(q)) as test_client:
        yield test_client


def _jobs(q: Queue, count: int, *, queue: str = "default", task: str = "t") -> list[int]:
    return [q.enqueue_by_name(task, queue=queue).id for _ in range(count)]


def _csrf(client: TestClient, path: str = "/") -> str:
    """The form token a page carries (the page also sets the cookie it must match)."""
    page = client.get(path)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    assert client.cookies.get(CSRF_COOKIE) == found.group(1)
    return found.group(1)


# -- the JSON API ---------------------------------------------------------------------------


def test_stats_and_jobs_are_the_cli_objects(client: TestClient, q: Queue) -> None:
    ids = _jobs(q, 2, queue="email")
    served = client.get("/api/stats").json()["queues"]
    expected = [s.to_dict() for s in q.stats()]
    for entry in (*served, *expected):  # the one value that moves between the two reads
        assert entry.pop("oldest_queued_age_seconds") >= 0
    assert served == expected
    listed = client.get("/api/jobs", params={"queue": "email"}).json()
    assert [job["id"] for job in listed["jobs"]] == ids[::-1]
    assert listed["jobs"][0] == q.get_job(ids[1]).to_dict()  # type: ignore[union-attr]
    assert listed["next_cursor"] is None
    # The contract's own spelling: empty filters are no filters.
    assert client.get("/api/jobs?status=&queue=").json()["jobs"] == listed["jobs"]
    assert client.get("/api/dead?queue=&task=").json() == {"jobs": [], "next_cursor": None}
    assert client.get(f"/api/jobs/{ids[0]}").json() == q.get_job(ids[0]).to_dict()  # type: ignore[union-attr]


def test_cli_json_and_api_give_the_same_pages(client: TestClient, q: Queue, dsn: str) -> None:
    """``pgq jobs list --json`` and ``GET /api/jobs`` print the same objects, page by page
    (the same Queue.job_page underneath), and the CLI names the next page's cursor."""
    ids = _jobs(q, 3, queue="cli")
    api = client.get("/api/jobs", params={"queue": "cli", "limit": 2}).json()
    listing = ["jobs", "list", "--dsn", dsn, "--queue", "cli", "--limit", "2"]
    first = CliRunner().invoke(app, [*listing, "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == api["jobs"]
    table = CliRunner().invoke(app, listing)
    assert f"add --cursor {api['next_cursor']} for the next page" in table.stdout
    rest = CliRunner().invoke(app, [*listing, "--json", "--cursor", api["next_cursor"]])
    assert [job["id"] for job in json.loads(rest.stdout)] == [ids[0]]


def test_jobs_page_with_a_keyset_cursor_and_filters(client: TestClient, q: Queue) -> None:
    ids = _jobs(q, 5, task="a") + _jobs(q, 2, task="b")
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"task": "a", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/api/jobs", params=params).json()
        seen += [job["id"] for job in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[:5][::-1]
    assert [j["id"] for j in client.get("/api/jobs?status=queued&task=b").json()["jobs"]] == \
        ids[5:][::-1]


def test_dead_jobs_page_in_failure_order_and_retry(client: TestClient, q: Queue,
                                                     dsn: str) -> None:
    ids = _jobs(q, 3)
    for age, job_id in zip(("3 minutes", "1 minute", "2 minutes"), ids, strict=True):
        make_dead(dsn, job_id, failed_ago=age)
    first = client.get("/api/dead", params={"limit": 2}).json()
    assert [job["id"] for job in first["jobs"]] == [ids[1], ids[2]]
    assert all(job["status"] == "dead" for job in first["jobs"])
    rest = client.get("/api/dead", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [job["id"] for job in rest["jobs"]] == [ids[0]] and rest["next_cursor"] is None
    retried = client.post(f"/api/dead/{ids[0]}/retry")
    assert retried.status_code == 200
    assert retried.json()["status"] == "queued" and retried.json()["id"] == ids[0]
    assert client.post(f"/api/dead/{ids[0]}/retry").status_code == 404
    everything = client.post("/api/dead/retry", params={"queue": "default"}).json()
    assert sorted(everything["retried"]) == sorted(ids[1:]) and everything["refused"] == []


def test_cancel_and_unknown_ids(client: TestClient, q: Queue) -> None:
    (job_id,) = _jobs(q, 1)
    cancelled = client.post(f"/api/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    for response in (client.get("/api/jobs/999999"), client.post("/api/jobs/999999/cancel"),
                     client.post("/api/dead/999999/retry"), client.get("/jobs/999999")):
        assert response.status_code == 404
    assert client.get("/api/jobs/999999").json() == {"error": "no job with id 999999"}


def test_status_filters_of_rare_statuses(client: TestClient, q: Queue, dsn: str) -> None:
    """running and waiting take the partial indexes' path (queries.select_live_jobs):
    the same rows as the API status says."""
    @q.task(name="first")
    def first() -> int:
        return 1

    @q.task(name="second")
    def second(value: int) -> int:
        return value

    handle = chain(first.s(), second.s()).enqueue()
    steps = sorted(_ids(client, "waiting") + _ids(client, "queued"))
    assert len(steps) == 2 and _ids(client, "waiting") == [max(steps)], handle
    (running,) = _jobs(q, 1)
    execute(dsn, "UPDATE pgqueue.jobs SET status = 'running', attempts = 1, worker_id = 'w', "
                 "lease_expires_at = now() + interval '30 seconds' WHERE id = %s", (running,))
    assert _ids(client, "running") == [running]
    # The workflow: as `pgq workflows show --json`, and on its steps' pages.
    described = client.get(f"/api/workflows/{handle.id}").json()
    assert described == q.get_workflow(handle.id).describe()  # type: ignore[union-attr]
    assert [step["id"] for step in described["steps"]] == steps
    page = client.get(f"/jobs/{steps[1]}").text
    assert f'data-step="{steps[0]}"' in page and f'data-step="{steps[1]}"' in page
    assert client.get("/api/workflows/999999").status_code == 404


def _ids(client: TestClient, status: str) -> list[int]:
    response = client.get("/api/jobs", params={"status": status})
    assert response.status_code == 200
    return [job["id"] for job in response.json()["jobs"]]


@pytest.mark.parametrize(("query", "status", "names"), [
    ("status=bogus", 400, "unknown status 'bogus'"),
    ("limit=0", 422, "invalid limit '0': Input should be greater than or equal to 1"),
    ("limit=many", 422, "invalid limit 'many'"),
    ("cursor=x@y", 400, "invalid cursor 'x@y'"),
])
def test_bad_filters_get_one_line(client: TestClient, query: str, status: int,
                                  names: str) -> None:
    response = client.get(f"/api/jobs?{query}")
    assert response.status_code == status
    message = response.json()["error"]
    assert names in message and "\n" not in message


def test_queues_and_schedules_pause_and_resume(client: TestClient, q: Queue) -> None:
    _jobs(q, 1, queue="email")
    assert client.post("/api/queues/email/pause").json()["paused"] is True
    listed = {entry["name"]: entry for entry in client.get("/api/queues").json()["queues"]}
    assert listed["email"]["paused"] is True
    assert client.get("/api/overview").json()["queues"][0]["paused"] is True
    assert client.post("/api/queues/email/resume").json()["paused"] is False
    q.schedule("nightly", "0 3 * * *", "t")
    assert client.post("/api/schedules/nightly/pause").json()["state"] == "paused"
    assert client.get("/api/schedules").json()["schedules"][0]["paused"] is True
    assert client.post("/api/schedules/nightly/resume").json()["paused"] is False
    assert client.post("/api/schedules/nope/pause").status_code == 404


def test_the_queues_and_schedules_pages_pause_and_resume_with_their_forms(
    client: TestClient, q: Queue
) -> None:
    _jobs(q, 1, queue="email")
    q.schedule("nightly", "0 3 * * *", "t")
    token = _csrf(client, "/queues")
    checks: list[tuple[str, Callable[[], bool]]] = [
        ("/queues/email", lambda: q.queues()[0].paused),
        ("/schedules/nightly", lambda: q.schedules()[0].paused)]
    for path, check in checks:
        assert client.post(f"{path}/pause").status_code == 403  # no CSRF token
        done = client.post(f"{path}/pause", data={"csrf_token": token},
                           follow_redirects=False)
        assert done.status_code == 303 and check()
        client.post(f"{path}/resume", data={"csrf_token": token})
        assert not check()
        assert client.post(f"{path}/stop", data={"csrf_token": token}).status_code == 404


def test_openapi_document_lists_the_contract_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/stats", "/api/jobs", "/api/jobs/{job_id}", "/api/dead",
                 "/api/dead/{job_id}/retry", "/api/jobs/{job_id}/cancel", "/healthz",
                 "/metrics"):
        assert path in paths, path


def test_the_operations_guide_api_examples_run(client: TestClient, q: Queue, dsn: str) -> None:
    """The curl lines of docs/guides/operations.md "HTTP API", sent to the app (its host
    and the token left aside): each answers 200, and the retry queues the dead job."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "operations.md")
    section = guide.read_text(encoding="utf-8").split("\n## HTTP API\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    lines = [line for block in re.findall(r"```bash\n(.*?)```", section, re.S)
             for line in block.splitlines() if line.startswith("curl ")]
    assert len(lines) == 3
    (job_id,) = _jobs(q, 1, queue="email")
    make_dead(dsn, job_id)
    for line in lines:
        words = shlex.split(line.replace("1234", str(job_id)))
        url = urlsplit(words[-1])
        method = words[words.index("-X") + 1] if "-X" in words else "GET"
        headers = dict([words[words.index("-H") + 1].split(": ", 1)]) if "-H" in words else {}
        response = client.request(method, url.path + (f"?{url.query}" if url.query else ""),
                                  headers=headers)
        assert response.status_code == 200, (line, response.text)
        if "/retry" in line:
            assert response.json()["status"] == "queued"
        if "status=dead" in line:
            assert [job["id"] for job in response.json()["jobs"]] == [job_id]


# -- /metrics and /healthz ------------------------------------------------------------------


def test_metrics_report_depth_age_and_dead(client: TestClient, q: Queue, dsn: str) -> None:
    _jobs(q, 2, queue="email")
    dead = _jobs(q, 1, queue="email")[0]
    make_dead(dsn, dead)
    execute(dsn, "UPDATE pgqueue.jobs SET run_at = now() - interval '90 seconds'")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'pgqueue_queue_depth{queue="email",status="queued"} 2.0' in text
    assert 'pgqueue_queue_depth{queue="email",status="running"} 0.0' in text
    assert 'pgqueue_dead_jobs{queue="email"} 1.0' in text
    age = re.search(r'pgqueue_oldest_queued_age_seconds\{queue="email"\} ([0-9.]+)', text)
    assert age and 89 < float(age.group(1)) < 200


def _horizon_held(text: str) -> str:
    """The metrics ``text`` if they show the horizon held for a second or more, else ''."""
    held = re.search(r"^pgqueue_xmin_horizon_age_seconds [1-9][0-9.e+-]*$", text, re.M)
    return text if held else ""


def test_metrics_and_overview_flag_unheld_running_jobs_and_the_horizon(
    client: TestClient, q: Queue, dsn: str
) -> None:
    unheld = _jobs(q, 1)[0]
    # Running under a worker that never registered (or whose row is gone): nobody's.
    execute(dsn, "UPDATE pgqueue.jobs SET status = 'running', worker_id = 'ghost', "
                 "attempts = 1, started_at = now(), "
                 "lease_expires_at = now() + interval '1 minute' WHERE id = %s", (unheld,))
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")
        # Transactions younger than a second do not count as holding the horizon.
        text: str = wait_until(lambda: _horizon_held(client.get("/metrics").text),
                               timeout=10, interval=0.2,
                               message="the horizon held for a second")
        assert "pgqueue_running_jobs_unheld 1.0" in text
        xids = re.search(r"^pgqueue_xmin_horizon_age_xids ([0-9.e+-]+)$", text, re.M)
        assert xids and float(xids.group(1)) >= 0
        assert re.search(r"^pgqueue_jobs_dead_tuples [0-9.e+]+$", text, re.M)
        assert re.search(r"^pgqueue_jobs_live_tuples [0-9.e+]+$", text, re.M)
        data = client.get("/api/overview").json()["database"]
        assert data["unheld_running"] == 1 and data["unheld_running_ids"] == [unheld]
        assert data["horizon_holder"].startswith(f"session {holder.info.backend_pid} ")
        page = client.get("/").text
        assert 'id="unheld"' in page and f'href="/jobs/{unheld}"' in page
        assert f"by session {holder.info.backend_pid} (idle in transaction" in page
    text = client.get("/metrics").text
    assert "pgqueue_xmin_horizon_age_seconds 0.0" in text
    assert "not held" in client.get("/").text


def test_healthz_is_200_with_the_database_and_503_without(q: Queue, dsn: str) -> None:
    with TestClient(create_app(q)) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
    gone = Queue(dsn="postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    with TestClient(create_app(gone)) as client:
        response = client.get("/healthz")
        assert response.status_code == 503 and response.json()["status"] == "unavailable"
    # A schema that is not there: the pages, the API and a scrape say what to run.
    unmigrated = Queue(dsn=dsn, schema="not_migrated")
    try:
        with TestClient(create_app(unmigrated)) as client:
            for path in ("/healthz", "/metrics", "/api/stats", "/"):
                response = client.get(path)
                assert response.status_code == 503, path
                assert "run pgq migrate" in response.text, path
    finally:
        unmigrated.close()


def _count(dsn: str, minutes_ago: int, queue: str, outcome: str, count: int) -> None:
    execute(dsn, "INSERT INTO pgqueue.job_counts (minute, queue, task, outcome, worker_id, count) "
                 "VALUES (date_trunc('minute', now()) - make_interval(mins => %s), %s, 't', %s, "
                 "'w1', %s)", (minutes_ago, queue, outcome, count))


def test_throughput_api_metrics_and_chart(client: TestClient, q: Queue, dsn: str) -> None:
    _count(dsn, 0, "email", "succeeded", 7)
    _count(dsn, 3, "email", "failed", 2)
    _count(dsn, 3, "email", "dead", 1)
    _count(dsn, 90, "email", "succeeded", 1000)  # older than the hour: left out
    points = client.get("/api/throughput").json()["throughput"]
    assert [(p["outcome"], p["count"]) for p in points] == [
        ("dead", 1), ("failed", 2), ("succeeded", 7)]
    text = client.get("/metrics").text
    assert 'pgqueue_job_outcomes_last_hour{outcome="succeeded",queue="email"} 7.0' in text
    assert 'pgqueue_job_outcomes_last_hour{outcome="failed",queue="email"} 2.0' in text
    page = client.get("/").text
    bars = re.findall(r"<title>(\d\d:\d\d) UTC: (\d+) succeeded, (\d+) failed</title>", page)
    assert len(bars) == 60
    counts = [(int(ok), int(bad)) for _, ok, bad in bars]
    # The current minute is last (or, if a minute began between the insert and the read,
    # the one before): bars are in order, three minutes apart, and nothing else is drawn.
    now_bar = max(i for i, c in enumerate(counts) if c == (7, 0))
    assert now_bar >= 58 and counts[now_bar - 3] == (0, 3)
    assert sum(ok + bad for ok, bad in counts) == 10
    assert client.get("/api/throughput?minutes=0").status_code == 422
    _jobs(q, 1, queue="email")  # the overview lists queues with unfinished or dead jobs
    row = re.search(r'<tr data-queue="email">(.*?)</tr>', client.get("/").text, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num[^"]*">(\d+)</td>', row.group(1))
    assert cells[-2:] == ["7", "3"]  # done and failed in the last hour


# -- pages ----------------------------------------------------------------------------------


def test_pages_render(client: TestClient, q: Queue, dsn: str) -> None:
    ids = _jobs(q, 2, queue="email")
    make_dead(dsn, ids[0], error="Traceback (most recent call last):\nValueError: boom")
    q.schedule("nightly", "0 3 * * *", "t")
    overview = client.get("/")
    assert overview.status_code == 200 and 'data-queue="email"' in overview.text
    assert "No workers running." in overview.text
    assert f'data-job="{ids[1]}"' in client.get("/jobs?queue=email&status=queued").text
    detail = client.get(f"/jobs/{ids[0]}").text
    assert "ValueError: boom" in detail and 'id="retry"' in detail
    assert "ValueError: boom" in client.get("/dead").text
    assert 'data-queue="email"' in client.get("/queues").text
    assert 'data-schedule="nightly"' in client.get("/schedules").text
    assert "frame-ancestors 'none'" in overview.headers["content-security-policy"]
    assert overview.headers["x-frame-options"] == "DENY"
    # The refresh script's request: the live part only, no page around it.
    fragment = client.get("/", headers={"X-Pgqueue-Fragment": "1"}).text
    assert 'data-queue="email"' in fragment and "<html" not in fragment


def test_forms_need_the_csrf_token(client: TestClient, q: Queue, dsn: str) -> None:
    (job_id,) = _jobs(q, 1)
    make_dead(dsn, job_id)
    assert client.post(f"/dead/{job_id}/retry").status_code == 403
    assert client.post(f"/dead/{job_id}/retry", data={"csrf_token": "forged"}).status_code == 403
    assert client.post(f"/dead/{job_id}/retry",
                       headers={"Authorization": "Basic dTpw"}).status_code == 403
    assert q.get_job(job_id).status == "dead"  # type: ignore[union-attr]
    token = _csrf(client, "/dead")
    done = client.post(f"/dead/{job_id}/retry", data={"csrf_token": token},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(f"/jobs/{job_id}")
    assert q.get_job(job_id).status == "queued"  # type: ignore[union-attr]


def test_cross_site_writes_are_refused(client: TestClient, q: Queue) -> None:
    (job_id,) = _jobs(q, 1)
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "null"},
                    # Basic credentials a browser remembers for a proxy prove nothing.
                    {"Origin": "https://evil.example", "Authorization": "Basic dTpw"}):
        response = client.post(f"/api/jobs/{job_id}/cancel", headers=headers)
        assert response.status_code == 403, headers
    assert q.get_job(job_id).status == "queued"  # type: ignore[union-attr]
    same = client.post(f"/api/jobs/{job_id}/cancel", headers={"Origin": "http://testserver"})
    assert same.status_code == 200


def test_loopback_bind_refuses_other_host_names(q: Queue) -> None:
    app = create_app(q, Access.for_bind("127.0.0.1", None))
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/api/stats").status_code == 200
    with TestClient(app, base_url="http://rebound.example:8080") as client:
        assert client.get("/api/stats").status_code == 403


def test_non_loopback_bind_needs_a_token() -> None:
    with pytest.raises(ValueError, match="PGQUEUE_DASHBOARD_TOKEN"):
        Access.for_bind("0.0.0.0", None)
    assert Access.for_bind("0.0.0.0", TOKEN).token == TOKEN
    assert Access.for_bind("::1", None).token is None


def test_with_a_token_everything_but_healthz_needs_it(q: Queue) -> None:
    app = create_app(q, Access.for_bind("0.0.0.0", TOKEN))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/stats").status_code == 401
        assert client.get("/metrics").status_code == 401
        assert client.get("/api/stats", headers={"Authorization": "Bearer wrong"}
                          ).status_code == 401
        page = client.get("/jobs?queue=x", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Fjobs%3Fqueue%3Dx"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/stats", headers=bearer).status_code == 200
        assert client.get("/metrics", headers=bearer).status_code == 200


def test_login_form_sets_a_strict_http_only_cookie(q: Queue) -> None:
    (job_id,) = _jobs(q, 1)
    app = create_app(q, Access.for_bind("0.0.0.0", TOKEN))
    with TestClient(app) as client:
        token = _csrf(client, "/login")
        wrong = client.post("/login", data={"csrf_token": token, "token": "nope"})
        assert wrong.status_code == 401 and "wrong token" in wrong.text
        done = client.post("/login", data={"csrf_token": token, "token": TOKEN,
                                           "next": "//evil.example/"}, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == "/"
        cookie = done.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=") and TOKEN not in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert client.get("/").status_code == 200
        # An API write on the cookie alone must repeat the CSRF cookie in a header, which
        # a page of the dashboard offers its scripts in a meta tag.
        assert f'<meta name="csrf-token" content="{token}">' in client.get("/").text
        assert client.post(f"/api/jobs/{job_id}/cancel").status_code == 403
        assert client.post(f"/api/jobs/{job_id}/cancel",
                           headers={"X-CSRF-Token": token}).status_code == 200


# -- the overview's cost --------------------------------------------------------------------


def test_overview_statement_reads_only_indexes(conn: psycopg.Connection[Any]) -> None:
    """With sequential scans priced out, every table of the overview is read through an
    index: proof that one exists for each branch (on a big table the planner picks it by
    itself: benchmarks/dashboard.py)."""
    conn.execute("SET enable_seqscan = off")
    plan = conn.execute(b"EXPLAIN (FORMAT TEXT) " + for_schema("pgqueue").overview_counts)
    text = "\n".join(row[0] for row in plan.fetchall())
    scans = re.findall(r"(Seq Scan|Index Only Scan|Index Scan|Bitmap Index Scan) "
                       r"(?:Backward )?(?:using (\w+) )?on (\w+)", text)
    assert not [s for s in scans if s[0] == "Seq Scan" and s[2] in ("jobs", "dead_jobs")], text
    # "Index Scan using IDX on TABLE", but "Bitmap Index Scan on IDX".
    used = {index or (name if kind == "Bitmap Index Scan" else "")
            for kind, index, name in scans} - {""}
    assert {"jobs_lease_idx", "jobs_workflow_idx"} <= used, text
    # The backlog through the claim index, or through a covering index on (queue, run_at)
    # if the schema gains one (benchmarks/dashboard.py --backlog-index measures it).
    assert used & {"jobs_claim_idx", "jobs_queue_backlog_idx"}, text
    assert used & {"dead_jobs_queue_idx"}, text


def test_job_pages_walk_the_primary_key(conn: psycopg.Connection[Any]) -> None:
    """A deep page is an index range scan from the cursor, never an OFFSET."""
    queries = for_schema("pgqueue")
    conn.execute("SET enable_seqscan = off")
    for statement, params in (
        (queries.select_jobs, {"status": None, "queue": None, "task": None, "limit": 50,
                               "before_id": 1000, "before_failed_at": None}),
        (queries.select_live_jobs, {"status": "queued", "queue": None, "task": None,
                                    "limit": 50, "before_id": 1000, "before_failed_at": None}),
    ):
        assert b"OFFSET" not in statement.upper()
        text = "\n".join(row[0] for row in conn.execute(b"EXPLAIN " + statement, params))
        assert "jobs_pkey" in text and "Seq Scan" not in text, text
