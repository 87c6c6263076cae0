"""Tracing (pgqueue/tracing.py) with OpenTelemetry's SDK and its in-memory exporter: the
enqueuer's trace context is stored in meta["otel"], and each attempt runs in a span that
continues it, sync tasks (threads) and async tasks alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pgqueue import Discard, JobContext, Queue, tracing
from pgqueue.tracing import META_KEY
from tests.integration._worker_helpers import aexecute, run_burst

_EXPORTER = InMemorySpanExporter()
_INSTALLED = False


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The SDK's provider, installed once per process (OpenTelemetry allows one), and an
    exporter emptied for each test."""
    global _INSTALLED
    if not _INSTALLED:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _INSTALLED = True
    # Workers ask again whether a provider is set at most every second: now.
    monkeypatch.setattr(tracing, "_checked_at", float("-inf"))
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_each_attempt_continues_the_enqueuers_trace(
    aq: Queue, dsn: str, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("test")

    @aq.task(name="sync_child")
    def sync_child(n: int) -> int:
        with tracer.start_as_current_span("inside sync"):
            return n

    @aq.task(name="async_child", max_attempts=2, retry_intervals=[0])
    async def async_child(ctx: JobContext) -> None:
        with tracer.start_as_current_span("inside async"):
            if ctx.attempt == 1:
                raise ValueError("first attempt fails")

    with tracer.start_as_current_span("request") as request:
        one = await sync_child.enqueue_async(1)
        many = await sync_child.enqueue_many_async([(2,), (3,)])
        failing = await async_child.using(meta={"tenant": 7}).enqueue_async()
    untraced = await sync_child.enqueue_async(4)
    trace_id = request.get_span_context().trace_id

    rows = await aexecute(dsn, "SELECT id, meta FROM pgqueue.jobs ORDER BY id")
    metas = {row["id"]: row["meta"] for row in rows}
    assert metas[one.id][META_KEY]["traceparent"].startswith(f"00-{trace_id:032x}-")
    assert metas[failing.id]["tenant"] == 7 and META_KEY in metas[failing.id]
    assert all(META_KEY in metas[job.id] for job in many)
    assert metas[untraced.id] == {}

    await run_burst(aq)

    processed = _named(spans, "process sync_child")
    assert len(processed) == 4
    by_job = {s.attributes["pgqueue.job.id"]: s for s in processed}  # type: ignore[index]
    for job in (one, *many):
        span = by_job[job.id]
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.kind is SpanKind.CONSUMER
        assert dict(span.attributes or {}).items() >= {
            "pgqueue.task": "sync_child", "pgqueue.queue": "default", "pgqueue.attempt": 1,
            "pgqueue.outcome": "succeeded", "messaging.system": "pgqueue",
            "messaging.destination.name": "default",
            "messaging.message.id": str(job.id)}.items()
    assert by_job[untraced.id].context.trace_id != trace_id  # a trace of its own
    assert by_job[untraced.id].parent is None

    # The task's own spans are children of the attempt's, in a thread too.
    (inside,) = [s for s in _named(spans, "inside sync")
                 if s.context.trace_id == by_job[one.id].context.trace_id
                 and s.parent is not None
                 and s.parent.span_id == by_job[one.id].context.span_id]
    assert inside is not None

    attempts = sorted(_named(spans, "process async_child"),
                      key=lambda s: int(s.attributes["pgqueue.attempt"]))  # type: ignore[index,arg-type]
    assert [(s.attributes["pgqueue.attempt"], s.attributes["pgqueue.outcome"],  # type: ignore[index]
             s.status.status_code) for s in attempts] == [
        (1, "failed", StatusCode.ERROR), (2, "succeeded", StatusCode.UNSET)]
    assert attempts[0].status.description == "ValueError: first attempt fails"
    assert all(s.context.trace_id == trace_id for s in attempts)
    children = _named(spans, "inside async")
    assert {c.parent.span_id for c in children if c.parent} == {
        s.context.span_id for s in attempts}


async def test_a_dead_attempt_is_an_error_and_hostile_trace_meta_is_ignored(
    aq: Queue, dsn: str, spans: InMemorySpanExporter
) -> None:
    @aq.task(name="give_up")
    async def give_up() -> None:
        raise Discard("no")

    @aq.task(name="fine")
    async def fine() -> None:
        return None

    await give_up.enqueue_async()
    hostile: list[Any] = ["junk", {"traceparent": 5}, {"traceparent": "00-zz-zz-01"},
                          {str(n): "x" for n in range(50)}]
    jobs = [await fine.using(meta={META_KEY: value}).enqueue_async() for value in hostile]
    await run_burst(aq)

    (span,) = _named(spans, "process give_up")
    assert span.attributes["pgqueue.outcome"] == "dead"  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR
    fine_spans = _named(spans, "process fine")
    assert len(fine_spans) == len(jobs)
    assert all(s.parent is None and s.attributes["pgqueue.outcome"] == "succeeded"  # type: ignore[index]
               for s in fine_spans)
    rows = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs "
                               "WHERE status = 'succeeded'")
    assert rows == [{"n": len(jobs)}]


async def test_every_step_of_a_workflow_continues_the_enqueuers_trace(
    aq: Queue, spans: InMemorySpanExporter
) -> None:
    from pgqueue.workflows import chain

    @aq.task(name="first")
    async def first() -> int:
        return 1

    @aq.task(name="second")
    async def second(previous: int) -> int:
        return previous + 1

    with trace.get_tracer("test").start_as_current_span("request") as request:
        await chain(first.s(), second.s()).enqueue_async()
    await run_burst(aq)
    steps = _named(spans, "process first") + _named(spans, "process second")
    assert len(steps) == 2
    assert {s.context.trace_id for s in steps} == {request.get_span_context().trace_id}
