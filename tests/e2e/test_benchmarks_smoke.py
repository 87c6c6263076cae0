"""The benchmark scripts keep working: each runs with a tiny N and prints its JSON line.

Benchmarks are not timed tests: nothing here checks a rate or a latency, only that every
script runs end to end against the test database (``--dsn``), exits 0 and prints one
JSON line on stdout with the keys the docs and the performance page rely on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

CASES = {
    "throughput": (
        ["--jobs", "500", "--reps", "1"],
        {"drain_per_s", "enqueue_per_s", "duplicates", "missing", "complete", "runs", "machine"},
    ),
    "slot_bound": (
        ["--concurrency", "2,4", "--statements", "20", "--drain", "--jobs", "200"],
        {"statements", "jobs", "rows", "machine"},
    ),
    "claim_cost": (
        ["--ready", "300", "--sizes", "10,100"],
        {"ready", "results", "machine"},
    ),
    "metrics_overhead": (
        ["--jobs", "200", "--reps", "1", "--scrape-interval", "0.05"],
        {"drain_ratio_paired_median", "cpu_ratio_paired_median", "off", "on", "scrapes",
         "machine"},
    ),
    "latency": (
        ["--jobs", "20", "--gap", "0.01", "--warmup", "0.3"],
        {"p50_ms", "p99_ms", "max_ms", "enqueue_call_p50_ms", "missing", "complete"},
    ),
    "pgbouncer": (
        ["--jobs", "10", "--gap", "0.01", "--warmup", "0.3", "--drain-jobs", "300",
         "--workers", "2"],
        {"direct", "pooled_listen", "pooled_poll", "duplicates", "missing", "complete"},
    ),
    "periodic": (
        ["--ticks", "5", "--lag-ticks", "1", "--lead", "0.2", "--jobs", "200"],
        {"round", "lag", "claims", "duplicates", "missing", "machine"},
    ),
    "queue_settings": (
        ["--ready", "200", "--paused-ahead", "50", "--claims", "5", "--queued", "20",
         "--enqueues", "5"],
        {"claim", "enqueue", "machine"},
    ),
    "bulk_enqueue": (
        ["--jobs", "2000", "--reps", "1"],
        {"annotated_per_s", "annotated_insert_per_s", "plain_per_s", "raw_minimal_per_s",
         "raw_shaped_per_s", "annotated_vs_raw_minimal", "plain_vs_raw_shaped"},
    ),
    "scaling": (
        ["--jobs", "600", "--processes", "1,2", "--reps", "1"],
        {"results", "does_not_fall"},
    ),
    "large_table": (
        ["--finished", "20000", "--claims", "50", "--pinned-claims", "5"],
        {"empty_p50_ms", "large_p50_ms", "large_vs_empty_p50", "flat", "pinned_p50_ms",
         "released_p50_ms", "phases"},
    ),
    "steps": (
        ["--jobs", "50", "--steps", "2", "--reps", "1"],
        {"ms_per_step_async", "ms_per_step_sync", "plain_per_s_async", "steps_per_s_async",
         "plain_per_s_sync", "steps_per_s_sync", "complete", "runs", "machine"},
    ),
    "workflows": (
        ["--members", "50", "--chain", "5", "--reps", "1"],
        {"enqueue_ms", "drain_s", "drain_per_s", "group_vs_plain",
         "chord_overhead_ms_per_member", "fan_in_ms", "chain_per_step_ms", "complete",
         "machine"},
    ),
    "limits": (
        ["--jobs", "100", "--keys", "5", "--ready", "200", "--claims", "5", "--soak", "0.05",
         "--rate", "20", "--kill-every", "1"],
        {"overhead", "soak", "complete", "machine"},
    ),
    "dashboard": (
        ["--jobs", "2000", "--dead", "200", "--requests", "2"],
        {"results", "by_status", "backlog", "backlog_index", "machine"},
    ),
    "soak": (
        ["--minutes", "0.2", "--rate", "200"],
        {"per_minute", "samples", "p99_ms", "recovered", "bounded", "dead_tuples_end", "autovacuum",
         "jobs_mb_max", "drained"},
    ),
    "vacuum_horizon": (
        ["--hold-minutes", "0.05", "--before", "0.05", "--drain-jobs", "200", "--sample", "0.5",
         "--calibrate", "0.2", "--drain-timeout", "60"],
        {"drain_per_s", "offered_per_s", "started_per_min_held", "recovered_s_after_hold",
         "claim_scan_pages_held_max", "dead_tuples_max", "horizon_age_s_max", "soak",
         "machine"},
    ),
    # Starts servers of its own (--dsn is not used).
    "failover": (
        ["--runs", "sync-kill", "--workers", "1", "--concurrency", "2", "--before", "1",
         "--after", "1", "--interval", "0.02"],
        {"runs", "workers", "lease"},
    ),
    "workloads": (
        ["--cpu-jobs", "20", "--cpu-ms", "1", "--cpu-processes", "1", "--io-concurrency", "8",
         "--io-jobs-per-slot", "2", "--mixed-cpu-jobs", "10", "--mixed-io-jobs", "40",
         "--reps", "1"],
        {"cpu", "cpu_speedup", "io", "mixed", "cpu_work_ms", "duplicates", "missing",
         "machine"},
    ),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_benchmark_runs_and_prints_its_json_line(script: str, dsn: str) -> None:
    args, keys = CASES[script]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{script}.py"), "--dsn", dsn, *args],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout[-2000:]
    result = json.loads(lines[0])
    assert result["benchmark"] == script
    assert keys <= result.keys(), sorted(keys - result.keys())
    assert result.get("duplicates", 0) == 0
    assert result.get("missing", 0) == 0
