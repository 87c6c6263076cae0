"""OpenTelemetry tracing: a job's attempts continue the trace of the code that enqueued it.

With ``opentelemetry-api`` installed (``pgqueue[otel]``):

* **Enqueue** (``enqueue``, ``enqueue_many``, workflows, and their async forms): when a span is
  current, its W3C trace context (``traceparent``, and ``tracestate``/``baggage`` when
  set) is stored in the job's ``meta`` under :data:`META_KEY`, through the globally
  configured propagator. In ``meta`` rather than a column: every claim already reads
  ``meta``, a row inserted from SQL or another language can set it, and a job without a
  trace pays nothing. A ``meta["otel"]`` the caller gave is kept as given.
* **Worker**: each attempt runs in a ``CONSUMER`` span named ``process <task>``, the
  child of the stored context (a new trace when there is none), current while the task
  runs — spans the task opens are its children, in threads too. Attributes:
  ``pgqueue.job.id``, ``pgqueue.task``, ``pgqueue.queue``, ``pgqueue.attempt``,
  ``pgqueue.outcome`` (as in the metrics and logs) and the ``messaging.*`` ones of
  OpenTelemetry's conventions; a failed or dead attempt has status ``ERROR``.

Without the package, :data:`ENABLED` is False, the import below was attempted once, and
the hooks are never called: no cost. With the API but no SDK configured (its default
no-op provider), :func:`active` is False and attempts get no span either: a no-op span
still cost ~25 µs per attempt, a tenth of a no-op job's whole cost in the worker. A
hostile ``meta["otel"]`` (not an object, junk values) is ignored, never an error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from pgqueue.serialization import dumps, loads

if TYPE_CHECKING:
    from pgqueue.db.queries import ClaimedJob
    from pgqueue.worker.outcome import Outcome

try:
    from opentelemetry import propagate, trace

    ENABLED = True
    # The API's own providers: nothing configured yet (proxy), or tracing switched off.
    _NO_PROVIDERS: tuple[type, ...] = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
except ImportError:  # the extra is not installed
    ENABLED = False

__all__ = ["ENABLED", "META_KEY", "active", "attempt_span", "current_carrier",
           "record_outcome", "with_trace_context"]

# meta["otel"]: the W3C trace context carrier of the enqueuer's span.
META_KEY: Final = "otel"

# The outcome attribute of each kind (the names of job_counts, metrics and logs).
_OUTCOMES: Final = {"succeeded": "succeeded", "result": "succeeded", "retry": "failed",
                    "dead": "dead", "cancelled": "cancelled", "snooze": "snoozed",
                    "release": "released"}
_MAX_CARRIER = 8  # entries; W3C defines three


def active() -> bool:
    """Whether a tracer provider is configured (an SDK), so spans are worth making.
    Call only when :data:`ENABLED`.

    Asked again at most every ``_RECHECK`` seconds: reading the provider costs ~4 µs
    (the API looks at the environment each time while none is set), and a provider set
    up after the worker started is picked up within that second.
    """
    global _active, _checked_at
    now = time.monotonic()
    if now - _checked_at >= _RECHECK:
        _active = not isinstance(trace.get_tracer_provider(), _NO_PROVIDERS)
        _checked_at = now
    return _active


_RECHECK: Final = 1.0
_active = False
_checked_at = -_RECHECK


def current_carrier() -> dict[str, str] | None:
    """The current span's W3C trace context as a carrier dict, or None when no valid span
    is current. Call only when :data:`ENABLED`."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def with_trace_context(meta: str) -> str:
    """``meta`` (JSON text) with the current span's trace context added, if there is a
    valid current span; else ``meta`` unchanged. Call only when :data:`ENABLED`."""
    carrier = current_carrier()
    if carrier is None:
        return meta
    values = loads(meta)
    if META_KEY in values:
        return meta
    values[META_KEY] = carrier
    return dumps(values)


@contextlib.contextmanager
def attempt_span(job: ClaimedJob) -> Iterator[Any]:
    """The span of one attempt, current inside the block; :func:`record_outcome` ends
    its story. Call only when :data:`ENABLED`."""
    tracer = trace.get_tracer("pgqueue")  # the provider's own cache makes this cheap
    attributes: dict[str, str | int] = {
        "messaging.system": "pgqueue", "messaging.operation": "process",
        "messaging.destination.name": job.queue, "messaging.message.id": str(job.id),
        "pgqueue.job.id": job.id, "pgqueue.task": job.task, "pgqueue.queue": job.queue,
        "pgqueue.attempt": job.attempt,
    }
    with tracer.start_as_current_span(
        f"process {job.task}", context=_parent(job.meta), kind=trace.SpanKind.CONSUMER,
        attributes=attributes, record_exception=False, set_status_on_exception=True,
    ) as span:
        yield span


def record_outcome(span: Any, outcome: Outcome | None) -> None:
    """Put the attempt's outcome on its span (None: the lease was lost)."""
    name = "lease_lost" if outcome is None else _OUTCOMES.get(outcome.kind, outcome.kind)
    span.set_attribute("pgqueue.outcome", name)
    if outcome is not None and outcome.kind in ("retry", "dead"):
        lines = (outcome.error or "").strip().splitlines()
        span.set_status(trace.Status(trace.StatusCode.ERROR, lines[-1] if lines else None))


def _parent(meta: dict[str, Any]) -> Any:
    """The enqueuer's context from ``meta``, or None (a root span) when there is none or
    it is not a carrier of strings."""
    carrier = meta.get(META_KEY) if isinstance(meta, dict) else None
    if not isinstance(carrier, dict) or len(carrier) > _MAX_CARRIER or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()):
        return None
    try:
        return propagate.extract(carrier)
    except Exception:  # a propagator choking on junk: the attempt runs untraced-parent
        return None
