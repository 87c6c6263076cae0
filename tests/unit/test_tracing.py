"""pgqueue/tracing.py without a database: what enqueue stores, what the worker reads."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

from pgqueue import tracing
from pgqueue.options import JobOptions

TRACER = TracerProvider().get_tracer("test")  # a provider of its own: no global state


def test_without_a_current_span_meta_is_unchanged() -> None:
    assert tracing.ENABLED
    assert tracing.with_trace_context('{"a":1}') == '{"a":1}'
    assert JobOptions().as_params()["meta"] == "{}"


def test_with_a_current_span_its_context_is_stored_under_otel() -> None:
    with TRACER.start_as_current_span("request") as span:
        meta = json.loads(JobOptions(meta='{"a":1}').as_params()["meta"])
        given = tracing.with_trace_context('{"otel":{"traceparent":"mine"}}')
    context = span.get_span_context()
    parent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert meta == {"a": 1, "otel": {"traceparent": parent}}
    assert json.loads(given) == {"otel": {"traceparent": "mine"}}  # the caller's, kept


def test_the_worker_ignores_a_carrier_that_is_not_one() -> None:
    for meta in ({}, {"otel": "x"}, {"otel": {"traceparent": 1}}, {"otel": ["a"]},
                 {"otel": {str(n): "v" for n in range(20)}}):
        assert tracing._parent(meta) is None, meta
    with TRACER.start_as_current_span("request"):
        carrier = json.loads(tracing.with_trace_context("{}"))
    assert tracing._parent(carrier) is not None


def test_spans_are_made_only_once_a_provider_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider: Any = ProxyTracerProvider()
    monkeypatch.setattr("opentelemetry.trace.get_tracer_provider", lambda: provider)
    monkeypatch.setattr(tracing, "_checked_at", float("-inf"))
    assert not tracing.active()
    provider = TracerProvider()
    assert not tracing.active()  # asked again within the second: the last answer
    monkeypatch.setattr(tracing, "_checked_at", float("-inf"))
    assert tracing.active()
    provider = NoOpTracerProvider()
    monkeypatch.setattr(tracing, "_checked_at", float("-inf"))
    assert not tracing.active()


def test_without_opentelemetry_nothing_is_imported_or_added() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if pgqueue[otel] were not installed\n"
        "from pgqueue import tracing\n"
        "from pgqueue.options import JobOptions\n"
        "print(tracing.ENABLED, JobOptions(meta='{\"a\":1}').as_params()['meta'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert result.stdout.split() == ["False", '{"a":1}']
