"""``GET /metrics`` of the dashboard: the queues' state in Prometheus' text format.

Read from the database at scrape time (one overview: indexes only; and the last hour of
``job_counts``), so any number of dashboards report the same values and none of them
needs a worker. The outcomes of the last hour are a gauge, not a counter: ``job_counts``
is pruned after 7 days, so a total over it would go down. What a *worker* measures about
the jobs it runs (the counter ``pgqueue_jobs_processed_total``, the histogram
``pgqueue_job_duration_seconds``) lives on that worker's own ``--metrics-port``:
docs/guides/operations.md says which metric is served where.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from pgqueue.health import DatabaseHealth
from pgqueue.stats import Overview, ThroughputPoint

# The statuses pgqueue_queue_depth reports: jobs not finished yet.
DEPTH_STATUSES = ("queued", "scheduled", "retrying", "waiting", "running")


class _OverviewCollector(Collector):
    """Metric families of one overview (a registry made per scrape collects it once)."""

    def __init__(self, overview: Overview, hour: list[ThroughputPoint]) -> None:
        self.overview = overview
        self.hour = hour

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "pgqueue_queue_depth", "Jobs not finished yet, by queue and API status.",
            labels=["queue", "status"])
        age = GaugeMetricFamily(
            "pgqueue_oldest_queued_age_seconds",
            "How long the oldest ready job of a queue has waited (0: none is waiting).",
            labels=["queue"])
        dead = GaugeMetricFamily("pgqueue_dead_jobs", "Jobs in dead_jobs, by queue.",
                                 labels=["queue"])
        paused = GaugeMetricFamily("pgqueue_queue_paused", "1 while a queue is paused.",
                                   labels=["queue"])
        for entry in self.overview.queues:
            for status in DEPTH_STATUSES:
                depth.add_metric([entry.queue, status], getattr(entry, status))
            age.add_metric([entry.queue], entry.oldest_queued_age_seconds or 0.0)
            dead.add_metric([entry.queue], entry.dead)
            paused.add_metric([entry.queue], 1.0 if entry.paused else 0.0)
        workers = GaugeMetricFamily(
            "pgqueue_workers", "Worker processes whose heartbeat lease is current.")
        workers.add_metric([], sum(1 for w in self.overview.workers if w.status == "alive"))
        outcomes = GaugeMetricFamily(
            "pgqueue_job_outcomes_last_hour",
            "Job outcomes over the last 60 minutes, by queue and outcome (succeeded, "
            "failed, dead, cancelled, snoozed), from the workers' per-minute counts.",
            labels=["queue", "outcome"])
        totals: dict[tuple[str, str], int] = {}
        for point in self.hour:
            key = (point.queue, point.outcome)
            totals[key] = totals.get(key, 0) + point.count
        for (queue, outcome), count in sorted(totals.items()):
            outcomes.add_metric([queue, outcome], count)
        yield from (depth, age, dead, paused, workers, outcomes)
        yield from _database_metrics(self.overview.database)


def _database_metrics(database: DatabaseHealth) -> Iterator[Metric]:
    """What the database does to the queue (``pgqueue.health.DatabaseHealth``)."""
    unheld = GaugeMetricFamily(
        "pgqueue_running_jobs_unheld",
        "Running jobs that no live worker holds (lease ran out, or worker gone, more than "
        "5 s ago): nothing runs or rescues them.")
    unheld.add_metric([], database.unheld_running)
    horizon = GaugeMetricFamily(
        "pgqueue_xmin_horizon_age_seconds",
        "How long the oldest session or prepared transaction of this database has held "
        "the xmin horizon (0: none holds it); vacuum removes no dead row meanwhile.")
    horizon.add_metric([], database.horizon_age_seconds or 0.0)
    xids = GaugeMetricFamily(
        "pgqueue_xmin_horizon_age_xids",
        "Age in transaction ids of the oldest xmin held back (sessions, prepared "
        "transactions, replication slots, standby feedback; 0: none).")
    xids.add_metric([], database.horizon_age_xids or 0)
    dead = GaugeMetricFamily("pgqueue_jobs_dead_tuples",
                             "Dead row versions in pgqueue.jobs (statistics estimate).")
    dead.add_metric([], database.jobs_dead_tuples)
    live = GaugeMetricFamily("pgqueue_jobs_live_tuples",
                             "Live rows in pgqueue.jobs (statistics estimate).")
    live.add_metric([], database.jobs_live_tuples)
    yield from (unheld, horizon, xids, dead, live)


def exposition(overview: Overview, hour: list[ThroughputPoint]) -> tuple[bytes, str]:
    """The text to serve for ``overview`` and the last hour's outcomes, and its content
    type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OverviewCollector(overview, hour))
    return generate_latest(registry), CONTENT_TYPE_LATEST
