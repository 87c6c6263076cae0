"""A worker process's Prometheus metrics (``pgq worker --metrics-port``).

Per process, kept in memory and read by a scrape of ``/metrics`` (``metrics_server.py``):

* ``pgqueue_jobs_processed_total{queue,task,outcome}`` — outcomes this worker recorded:
  ``succeeded``, ``failed`` (the attempt failed, the job runs again), ``dead``,
  ``cancelled``, ``snoozed`` (the names of ``job_counts.outcome``), and ``lease_lost``
  for an outcome the database refused because another worker holds the job now.
* ``pgqueue_job_duration_seconds{queue,task}`` — histogram of attempt run times.
* ``pgqueue_jobs_running`` — attempts running now; ``pgqueue_jobs_prefetched`` —
  claimed jobs waiting for a slot.
* ``pgqueue_claim_latency_seconds{queue}`` — from a job becoming due (``run_at``) to its
  claim: how long ready jobs wait for this worker.
* ``pgqueue_completion_latency_seconds`` — from the end of an attempt to the commit of
  its outcome (the completer's batching and write).
* ``pgqueue_worker_heartbeat_age_seconds``, ``pgqueue_worker_stuck_threads``,
  ``pgqueue_worker_concurrency`` and the standard ``process_*`` metrics.

Everything is registered in a private ``CollectorRegistry``: an application that embeds
a worker keeps its own default registry to itself. This module imports
``prometheus_client`` (the ``pgqueue[metrics]`` extra); the worker imports it only when a
metrics port is given, so a worker without one pays nothing, not even the import.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from pgqueue.worker.counts import COUNTED

if TYPE_CHECKING:
    from pgqueue.db.queries import ClaimedJob
    from pgqueue.worker.executor import Execution
    from pgqueue.worker.outcome import Outcome

__all__ = ["WorkerMetrics"]

# Job run times: from a few milliseconds (no-op tasks) to an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 300.0, 900.0, 3600.0, float("inf"))
# Latencies inside the worker and the database: milliseconds to a minute.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, float("inf"))


class WorkerMetrics:
    """The metrics of one worker process, and the hooks the worker calls to feed them.

    The gauges are read from callables at scrape time: nothing to keep in step.
    """

    def __init__(
        self,
        *,
        running: Callable[[], int],
        prefetched: Callable[[], int],
        heartbeat_age: Callable[[], float],
        stuck: Callable[[], int],
        concurrency: int,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.processed = Counter(
            "pgqueue_jobs_processed", "Job outcomes recorded by this worker.",
            ["queue", "task", "outcome"], registry=registry)
        self.duration = Histogram(
            "pgqueue_job_duration_seconds", "Run time of each attempt, in seconds.",
            ["queue", "task"], buckets=DURATION_BUCKETS, registry=registry)
        self.claim_latency = Histogram(
            "pgqueue_claim_latency_seconds",
            "Seconds from a job becoming due (run_at) to its claim by this worker.",
            ["queue"], buckets=LATENCY_BUCKETS, registry=registry)
        self.completion_latency = Histogram(
            "pgqueue_completion_latency_seconds",
            "Seconds from the end of an attempt to the commit of its outcome.",
            buckets=LATENCY_BUCKETS, registry=registry)
        Gauge("pgqueue_jobs_running", "Attempts running in this worker now.",
              registry=registry).set_function(running)
        Gauge("pgqueue_jobs_prefetched", "Jobs this worker claimed that wait for a slot.",
              registry=registry).set_function(prefetched)
        Gauge("pgqueue_worker_heartbeat_age_seconds",
              "Seconds since this worker's last successful heartbeat.",
              registry=registry).set_function(heartbeat_age)
        Gauge("pgqueue_worker_stuck_threads",
              "Threads stuck in a sync call whose attempt already ended.",
              registry=registry).set_function(stuck)
        Gauge("pgqueue_worker_concurrency", "Jobs this worker runs at once at most.",
              registry=registry).set(concurrency)
        ProcessCollector(registry=registry)
        # Attempts that ended, by claim, until their outcome is committed.
        self._ended: dict[tuple[int, int], float] = {}

    def claimed(self, job: ClaimedJob) -> None:
        """A claim took ``job``: how long it was due before that."""
        waited = time.time() - job.run_at.timestamp()
        self.claim_latency.labels(job.queue).observe(max(0.0, waited))

    def ended(self, execution: Execution, outcome: Outcome | None) -> None:
        """An attempt ended; ``outcome`` goes to the completer (None: nothing to record)."""
        now = time.monotonic()
        job = execution.job
        self.duration.labels(job.queue, job.task).observe(now - execution.started)
        if outcome is not None:
            self._ended[outcome.key] = now

    def recorded(self, outcome: Outcome, recorded: bool) -> None:
        """The completer wrote ``outcome`` (or the database refused it: lease lost)."""
        ended = self._ended.pop(outcome.key, None)
        if ended is not None:
            self.completion_latency.observe(time.monotonic() - ended)
        # Refused by the fence: another worker holds the job now.
        refused = "lease_lost" if outcome.final else None
        name = COUNTED.get(outcome.kind) if recorded else refused
        if name is not None:
            self.processed.labels(outcome.queue, outcome.task, name).inc()
