"""The Prometheus configuration and alert rules of docs/prometheus/ are valid, fire when
they should (``promtool test rules``), and name metrics pgqueue serves.

promtool comes from Debian's ``prometheus`` package, which ``.ci/run`` installs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pgqueue.metrics import WorkerMetrics

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus"

# The metrics of the dashboard's /metrics (pgqueue/dashboard/metrics.py, documented in
# docs/guides/operations.md "Dashboard metrics").
DASHBOARD_METRICS = {"pgqueue_queue_depth", "pgqueue_oldest_queued_age_seconds",
                     "pgqueue_dead_jobs", "pgqueue_queue_paused", "pgqueue_workers",
                     "pgqueue_job_outcomes_last_hour", "pgqueue_running_jobs_unheld",
                     "pgqueue_xmin_horizon_age_seconds", "pgqueue_xmin_horizon_age_xids",
                     "pgqueue_jobs_dead_tuples", "pgqueue_jobs_live_tuples"}


def _promtool(*args: str) -> str:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: apt-get install prometheus (.ci/run)"
    done = subprocess.run([promtool, *args], cwd=RULES, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("args", [("check", "config", "prometheus.yml"),
                                  ("check", "rules", "alerts.yml"),
                                  ("test", "rules", "alerts_test.yml")])
def test_promtool_accepts_the_configuration_and_the_rules_pass_their_tests(
    args: tuple[str, ...],
) -> None:
    assert "SUCCESS" in _promtool(*args)


def test_the_rules_name_metrics_that_exist() -> None:
    worker = WorkerMetrics(running=lambda: 0, prefetched=lambda: 0, heartbeat_age=lambda: 0,
                           stuck=lambda: 0, concurrency=1)
    served = {sample.name for metric in worker.registry.collect()
              for sample in metric.samples} | DASHBOARD_METRICS
    used = set(re.findall(r"\bpgqueue_\w+", (RULES / "alerts.yml").read_text()))
    assert used, "no metric found in alerts.yml"
    assert used <= served, used - served
    assert {"PgqueueQueueTooOld", "PgqueueDeadJobsGrowing", "PgqueueNoLiveWorker"} <= set(
        re.findall(r"alert: (\w+)", (RULES / "alerts.yml").read_text()))


def test_the_operations_guide_shows_the_files_as_they_are() -> None:
    guide = (RULES.parent / "guides" / "operations.md").read_text(encoding="utf-8")
    shown = re.findall(r"```yaml\n(.*?)```", guide, flags=re.DOTALL)
    for name in ("prometheus.yml", "alerts.yml"):
        assert (RULES / name).read_text(encoding="utf-8") in shown, name
