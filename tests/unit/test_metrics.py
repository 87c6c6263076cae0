"""The worker's metrics (pgqueue/metrics.py) and its HTTP endpoint (metrics_server.py),
without a database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from pgqueue.db.queries import ClaimedJob
from pgqueue.errors import ConfigurationError
from pgqueue.metrics import WorkerMetrics
from pgqueue.metrics_server import MetricsServer
from pgqueue.worker.executor import Execution
from pgqueue.worker.outcome import Outcome


def _job(job_id: int = 1, *, queue: str = "mail", task: str = "send",
         due_ago: float = 0.0) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(id=job_id, queue=queue, task=task, args=[], kwargs={}, priority=0,
                      attempt=1, max_attempts=3, timeout=None, meta={},
                      run_at=now - timedelta(seconds=due_ago), created_at=now, token=7)


def _metrics() -> WorkerMetrics:
    return WorkerMetrics(running=lambda: 3, prefetched=lambda: 2, heartbeat_age=lambda: 1.5,
                         stuck=lambda: 0, concurrency=8)


def _value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_outcomes_durations_and_latencies_are_observed() -> None:
    metrics = _metrics()
    job = _job(due_ago=2.0)
    metrics.claimed(job)
    execution = Execution(job, ctx=None)  # type: ignore[arg-type]
    outcome = Outcome.of(job, "succeeded", "null")
    metrics.ended(execution, outcome)
    metrics.recorded(outcome, True)
    metrics.recorded(Outcome.of(_job(2), "retry", error="x"), True)
    metrics.recorded(Outcome.of(_job(3), "dead", error="x"), False)  # fenced out
    metrics.recorded(Outcome.of(_job(4), "progress", progress="1"), False)  # not final
    metrics.recorded(Outcome.of(_job(5), "release"), True)  # not an outcome of processing

    processed = "pgqueue_jobs_processed_total"
    assert _value(metrics, processed, queue="mail", task="send", outcome="succeeded") == 1
    assert _value(metrics, processed, queue="mail", task="send", outcome="failed") == 1
    assert _value(metrics, processed, queue="mail", task="send", outcome="lease_lost") == 1
    assert _value(metrics, processed, queue="mail", task="send", outcome="dead") is None
    assert _value(metrics, "pgqueue_job_duration_seconds_count", queue="mail",
                  task="send") == 1
    claim_sum = _value(metrics, "pgqueue_claim_latency_seconds_sum", queue="mail")
    assert claim_sum is not None and 1.5 < claim_sum < 60
    assert _value(metrics, "pgqueue_completion_latency_seconds_count") == 1
    assert _value(metrics, "pgqueue_jobs_running") == 3
    assert _value(metrics, "pgqueue_jobs_prefetched") == 2
    assert _value(metrics, "pgqueue_worker_heartbeat_age_seconds") == 1.5
    assert _value(metrics, "pgqueue_worker_concurrency") == 8


def test_a_job_due_in_the_future_by_clock_skew_waited_zero() -> None:
    metrics = _metrics()
    metrics.claimed(_job(due_ago=-5.0))
    assert _value(metrics, "pgqueue_claim_latency_seconds_sum", queue="mail") == 0


def test_the_registry_is_private() -> None:
    from prometheus_client import REGISTRY

    _metrics()
    assert REGISTRY.get_sample_value("pgqueue_worker_concurrency") is None


async def _request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


@pytest.fixture
async def server() -> Any:
    registry = CollectorRegistry()
    Counter("things", "Things.", registry=registry).inc(2)
    state = {"healthy": True}
    served = MetricsServer(host="127.0.0.1", port=0, registry=registry,
                           health=lambda: (state["healthy"], {"status": "x"}))
    await served.start()
    try:
        yield served, state
    finally:
        await served.stop()


async def test_the_endpoint_serves_metrics_and_health(server: Any) -> None:
    served, state = server
    status, headers, body = await _request(served.port, b"GET /metrics HTTP/1.1\r\n"
                                                        b"Host: x\r\n\r\n")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")
    assert b"things_total 2.0" in body
    assert int(headers["Content-Length"]) == len(body)

    status, headers, body = await _request(served.port, b"GET /healthz?probe=1 HTTP/1.0\r\n\r\n")
    assert (status, headers["Content-Type"], body) == (200, "application/json",
                                                       b'{"status": "x"}\n')
    state["healthy"] = False
    status, _, _ = await _request(served.port, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert status == 503
    status, headers, body = await _request(served.port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert (status, body) == (503, b"")
    assert int(headers["Content-Length"]) > 0


async def test_the_endpoint_refuses_what_it_does_not_serve(server: Any) -> None:
    served, _ = server
    status, _, _ = await _request(served.port, b"GET / HTTP/1.1\r\n\r\n")
    assert status == 404
    status, headers, _ = await _request(served.port, b"POST /metrics HTTP/1.1\r\n\r\n")
    assert (status, headers["Allow"]) == (405, "GET, HEAD")
    # Not HTTP, or a header beyond the limit: the connection is closed without an answer.
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"hello\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    # It still serves afterwards.
    status, _, _ = await _request(served.port, b"GET /metrics HTTP/1.1\r\n\r\n")
    assert status == 200


async def test_a_port_in_use_is_a_one_line_configuration_error(server: Any) -> None:
    served, _ = server
    other = MetricsServer(host="127.0.0.1", port=served.port, registry=CollectorRegistry(),
                          health=lambda: (True, {}))
    with pytest.raises(ConfigurationError, match=r"cannot serve metrics on 127\.0\.0\.1:\d+ "
                                                 r"\(--metrics-port\): "):
        await other.start()


def test_generate_latest_of_a_fresh_worker_registry_names_every_metric() -> None:
    text = generate_latest(_metrics().registry).decode()
    for name in ("pgqueue_jobs_processed_total", "pgqueue_job_duration_seconds",
                 "pgqueue_jobs_running", "pgqueue_claim_latency_seconds",
                 "pgqueue_completion_latency_seconds", "process_cpu_seconds_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name


def test_a_worker_without_a_metrics_port_never_imports_prometheus_client() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from pgqueue import Queue\n"
        "from pgqueue.worker import Worker, WorkerSettings\n"
        "w = Worker(Queue(dsn='postgresql://u@127.0.0.1:1/x'), WorkerSettings())\n"
        "assert w.metrics is None and w.metrics_server is None\n"
        "print('prometheus_client' in sys.modules, 'pgqueue.metrics' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert result.stdout.split() == ["False", "False"]


def test_a_metrics_port_without_prometheus_client_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from pgqueue import Queue
    from pgqueue.worker import Worker, WorkerSettings

    for name in ("prometheus_client", "pgqueue.metrics", "pgqueue.metrics_server"):
        monkeypatch.setitem(sys.modules, name, None)
    queue = Queue(dsn="postgresql://u@127.0.0.1:1/x")
    with pytest.raises(ConfigurationError, match=r"needs prometheus-client .*"
                                                 r"pip install 'pgqueue\[metrics\]'"):
        Worker(queue, WorkerSettings(metrics_port=0))


def test_metrics_port_is_checked() -> None:
    from pgqueue.worker import WorkerSettings

    with pytest.raises(ConfigurationError, match="invalid worker setting metrics_port"):
        WorkerSettings(metrics_port=70000)



def test_worker_health_says_starting_failing_heartbeats_and_draining() -> None:
    import time

    from pgqueue import Queue
    from pgqueue.worker import Worker, WorkerSettings

    worker = Worker(Queue(dsn="postgresql://u@127.0.0.1:1/x"),
                    WorkerSettings(metrics_port=0, lease=3))
    healthy, body = worker.health()
    assert not healthy
    assert body["problems"] == ["starting: not connected to the database and registered yet"]
    worker._registered.set()
    healthy, body = worker.health()
    assert healthy and body["status"] == "ok" and body["problems"] == []
    worker.heartbeat.last_success = time.monotonic() - 10  # more than a lease ago
    healthy, body = worker.health()
    assert not healthy and body["problems"][0].startswith("heartbeats have failed for 10 s")
    worker.heartbeat.last_success = time.monotonic()
    worker.request_stop()
    healthy, body = worker.health()
    assert (healthy, body["draining"], body["problems"]) == (
        False, True, ["draining: shutting down, claiming no new jobs"])
