"""Soak: a steady producer for minutes, with a transaction held open in the middle.

A producer enqueues ``--rate`` jobs per second for ``--minutes`` (``enqueue_many`` every
``--tick`` seconds with the jobs that fell due, so the rate stays exact even when a call
is slow) into one ``pgq worker --concurrency C``. In the middle, another session runs
``BEGIN; SELECT txid_current();`` and stays idle in that transaction for
``--hold-minutes``: the xmin horizon is pinned, so vacuum can remove no dead tuple and
index scans cannot mark them dead. ``--hold-kind repeatable-read`` holds it the way a
long report does instead: ``BEGIN ISOLATION LEVEL REPEATABLE READ`` and one read of the
jobs table, then idle (a snapshot, no transaction id). Jobs use
``result_ttl = --result-ttl`` so the worker's pruner (every 30 s) keeps the finished rows
bounded.

Sampled every ``--sample`` seconds: backlog (ready, unclaimed jobs), running jobs,
``pg_relation_size`` of ``pgqueue.jobs`` and of its claim index, ``n_dead_tup`` and
``n_live_tup``, autovacuum runs, the age of the oldest snapshot (in transactions and in
seconds), the worker's CPU, and what a claim from the head of ``jobs_claim_idx`` costs
(``EXPLAIN (ANALYZE, BUFFERS)`` of the claim's scan, ``LIMIT 10``, read-only: the pages
it touched and its time). Reported per minute: jobs enqueued and started, p50/p99/max
enqueue→start latency (by enqueue minute), peak backlog, table size, dead tuples, the
claim scan's pages. Verdicts:

* ``recovered``: the backlog (ready jobs not yet claimed) stayed below
  ``max(rate x 2 s, 1000)`` before the hold (after the first minute) and fell back below
  it after the transaction ended, before the producer stopped;
* ``bounded``: from a minute after the transaction ended to the end, the jobs table
  grows less than 10 % (free space is reused instead of appended to) and its dead
  tuples end below ``max(2 x the peak before the hold, 20 % of its rows, 10 000)``.

    python benchmarks/soak.py --minutes 10 --rate 3000
"""

from __future__ import annotations

import array
import contextlib
import threading
import time
from typing import Any

import _common as c
import psycopg

SAMPLE_SQL = """
SELECT (SELECT count(*) FROM pgqueue.jobs WHERE status = 'queued' AND run_at <= now()),
       (SELECT count(*) FROM pgqueue.jobs WHERE status = 'running'),
       pg_relation_size('pgqueue.jobs'),
       pg_relation_size('pgqueue.jobs_claim_idx'),
       pg_total_relation_size('pgqueue.jobs'),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.vacuum_count,
       (SELECT max(greatest(age(backend_xmin), age(backend_xid))) FROM pg_stat_activity),
       (SELECT extract(epoch FROM max(now() - xact_start))::float8 FROM pg_stat_activity
         WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
           AND datname = current_database())
  FROM pg_stat_user_tables s
 WHERE s.schemaname = 'pgqueue' AND s.relname = 'jobs'
"""
SAMPLE_KEYS = ("backlog", "running", "jobs_bytes", "claim_index_bytes", "jobs_total_bytes",
               "n_live_tup", "n_dead_tup", "autovacuum_count", "vacuum_count", "oldest_xmin_age",
               "horizon_age_s")
# The claim's index scan from the head of jobs_claim_idx, as a claim after a wake-up runs
# it (the worker's claim adds FOR UPDATE SKIP LOCKED and its checks of paused queues and
# limits, which do not change the walk); enable_sort = off as on the claim connection.
CLAIM_SCAN_SQL = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM pgqueue.jobs WHERE status = 'queued' AND run_at <= now()
 ORDER BY priority DESC, run_at, id LIMIT 10
"""


class Sampler(threading.Thread):
    """Samples the jobs table every ``interval`` seconds on its own connection."""

    def __init__(self, dsn: str, interval: float, t0: float, worker_pid: int) -> None:
        super().__init__(daemon=True, name="soak-sampler")
        self.dsn = dsn
        self.interval = interval
        self.t0 = t0
        self.worker_pid = worker_pid
        self.samples: list[dict[str, Any]] = []
        self.stop_event = threading.Event()

    def sample(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        row = conn.execute(SAMPLE_SQL).fetchone()
        values = dict(zip(SAMPLE_KEYS, row or (None,) * len(SAMPLE_KEYS), strict=True))
        plan = conn.execute(CLAIM_SCAN_SQL).fetchone()
        top = plan[0][0] if plan else {}
        values["claim_scan_pages"] = (top.get("Plan", {}).get("Shared Hit Blocks", 0)
                                      + top.get("Plan", {}).get("Shared Read Blocks", 0))
        values["claim_scan_ms"] = round(top.get("Execution Time", 0.0), 3)
        values["t"] = round(time.time() - self.t0, 2)
        values["worker_cpu_s"] = c.cpu_seconds(self.worker_pid)
        return values

    def run(self) -> None:
        with c.connect(self.dsn) as conn:
            conn.execute("SET enable_sort = off")
            while not self.stop_event.is_set():
                with contextlib.suppress(psycopg.Error):
                    self.samples.append(self.sample(conn))
                self.stop_event.wait(self.interval)
            with contextlib.suppress(psycopg.Error):
                self.samples.append(self.sample(conn))


# What the holding session runs, then it stays idle until its COMMIT.
HOLDS = {
    "idle-in-transaction": ("BEGIN", "SELECT txid_current()"),
    "repeatable-read": ("BEGIN ISOLATION LEVEL REPEATABLE READ",
                        "SELECT count(*) FROM pgqueue.jobs"),
}


def bucket_stats(latencies: list[float]) -> dict[str, Any]:
    return {
        "started": len(latencies),
        "p50_ms": c.rounded(c.percentile(latencies, 0.5)),
        "p99_ms": c.rounded(c.percentile(latencies, 0.99)),
        "max_ms": c.rounded(max(latencies, default=None)),
    }


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=1000.0,
                   help="jobs per second (use ~70%% of throughput.py's drain rate)")
    p.add_argument("--hold-minutes", type=float, default=None,
                   help="how long the transaction stays open (default: min(2, minutes / 5))")
    p.add_argument("--hold-kind", choices=HOLDS, default="idle-in-transaction",
                   help="how the horizon is held: a session idle in a transaction that has "
                        "an id, or a REPEATABLE READ report's snapshot")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--result-ttl", type=int, default=60,
                   help="result_ttl of the soak's jobs (seconds finished rows are kept)")
    p.add_argument("--tick", type=float, default=0.02, help="seconds between enqueue_many calls")
    p.add_argument("--sample", type=float, default=None,
                   help="seconds between samples (default: 5, or less for short runs)")
    p.add_argument("--bucket", type=float, default=60.0, help="seconds per reported row")
    p.add_argument("--drain-timeout", type=float, default=300.0,
                   help="after the producer stops, wait this long for the backlog to clear")
    args = p.parse_args()
    duration = args.minutes * 60
    hold = (min(2.0, args.minutes / 5) if args.hold_minutes is None else args.hold_minutes) * 60
    hold_start = (duration - hold) / 2
    hold_end = hold_start + hold
    sample_every = args.sample or min(5.0, max(0.5, duration / 24))

    with c.bench_session(args.dsn, result_ttl=args.result_ttl, drop=args.drop) as bench:
        assert bench.module is not None
        info = c.machine(args.dsn)
        task = bench.module.noop
        bench.module.q.workers()  # open the enqueue pool
        committed = array.array("d")
        producer_calls: list[float] = []
        held = False
        with c.Workers(bench, concurrency=args.concurrency) as workers, \
                c.connect(args.dsn) as holder:
            t0 = time.time()
            sampler = Sampler(args.dsn, sample_every, t0, workers.pids()[0])
            sampler.start()
            sent = 0
            next_tick = time.monotonic()
            start = time.monotonic()
            while True:
                elapsed = time.monotonic() - start
                if elapsed >= duration:
                    break
                if not held and hold > 0 and hold_start <= elapsed < hold_end:
                    for statement in HOLDS[args.hold_kind]:
                        holder.execute(statement)
                    held = True
                    c.log(f"{elapsed:6.1f} s: transaction opened (held for {hold:.0f} s)")
                elif held and elapsed >= hold_end:
                    holder.execute("COMMIT")
                    held = False
                    c.log(f"{elapsed:6.1f} s: transaction ended")
                due = int(args.rate * elapsed) - sent
                if due > 0:
                    t_call = time.perf_counter()
                    task.enqueue_many([(i,) for i in range(sent, sent + due)])
                    now = time.time()
                    producer_calls.append(time.perf_counter() - t_call)
                    committed.extend([now] * due)
                    sent += due
                next_tick += args.tick
                time.sleep(max(0.0, next_tick - time.monotonic()))
            if held:
                holder.execute("COMMIT")
            c.log(f"producer done: {sent:,} jobs in {duration:.0f} s; draining")
            drained = bench.wait_for(sent, args.drain_timeout, interval=0.1)
            t_drained = time.time() - t0
            time.sleep(sample_every)
            sampler.stop_event.set()
            sampler.join()
        records = bench.read()

    # -- per-bucket latency (by enqueue time) and table state ------------------------------
    buckets = max(1, int(-(-duration // args.bucket)))
    latencies: list[list[float]] = [[] for _ in range(buckets)]
    starts: dict[int, float] = {}
    for index, started in records:
        if index not in starts or started < starts[index]:
            starts[index] = started
    for index, started in starts.items():
        if index < len(committed):
            at = committed[index]
            slot = min(buckets - 1, int((at - t0) // args.bucket))
            latencies[slot].append((started - at) * 1000)
    samples = sampler.samples
    rows = []
    for b in range(buckets):
        lo, hi = b * args.bucket, (b + 1) * args.bucket
        inside = [s for s in samples if lo <= s["t"] < hi] or samples[-1:]
        cpu = [s["worker_cpu_s"] for s in inside if s["worker_cpu_s"] is not None]
        pages = [s["claim_scan_pages"] for s in inside]
        rows.append({
            "minute": b + 1,
            "held": lo < hold_end and hi > hold_start and hold > 0,
            "enqueued": sum(1 for t in committed if lo <= t - t0 < hi),
            # Jobs that started during this bucket, whenever enqueued (bucket_stats'
            # "started" counts the bucket's enqueued jobs that started at all).
            "jobs_started": sum(1 for t in starts.values() if lo <= t - t0 < hi),
            "claim_scan_pages_max": max(pages, default=None),
            **bucket_stats(latencies[b]),
            "backlog_max": max((s["backlog"] for s in inside), default=None),
            "backlog_end": inside[-1]["backlog"] if inside else None,
            "jobs_mb": round(inside[-1]["jobs_bytes"] / 2**20, 1) if inside else None,
            "claim_index_mb": round(inside[-1]["claim_index_bytes"] / 2**20, 2)
            if inside else None,
            "n_dead_tup_max": max((s["n_dead_tup"] for s in inside), default=None),
            "n_live_tup_end": inside[-1]["n_live_tup"] if inside else None,
            "autovacuums": inside[-1]["autovacuum_count"] if inside else None,
            "worker_cpu_pct": round(100 * (cpu[-1] - cpu[0]) / max(1e-9, inside[-1]["t"]
                                                                   - inside[0]["t"]))
            if len(cpu) > 1 else None,
        })

    # -- verdicts ------------------------------------------------------------------------
    before = [s for s in samples if s["t"] < hold_start] or samples[:1]
    after = [s for s in samples if s["t"] >= hold_end]
    before_dead = max((s["n_dead_tup"] for s in before), default=0)
    # "Keeping up" = no more than two seconds of jobs waiting to be claimed.
    threshold = max(args.rate * 2.0, 1000)
    steady_before = all(s["backlog"] <= threshold for s in before
                        if s["t"] >= min(60.0, hold_start / 2))
    recovered_at = next((s["t"] for s in after if s["backlog"] <= threshold
                         and s["t"] <= duration + sample_every), None)
    recovered = steady_before and recovered_at is not None
    # Growth is judged once the hold's own growth is over: from a minute after it ended
    # (or half-way to the end of a short run) to the last sample.
    settle_from = hold_end + min(60.0, max(0.0, duration - hold_end) / 2)
    settled = [s for s in samples if s["t"] >= settle_from]
    if len(settled) >= 2:
        growth = settled[-1]["jobs_bytes"] / max(1, settled[0]["jobs_bytes"]) - 1
    else:
        growth = None
    last = samples[-1] if samples else {}
    dead_limit = max(2 * before_dead, 0.2 * (last.get("n_live_tup") or 0), 10_000)
    dead_ok = last.get("n_dead_tup") is not None and last["n_dead_tup"] <= dead_limit
    bounded = growth is not None and growth < 0.10 and dead_ok
    all_latencies = [lat for bucket in latencies for lat in bucket]
    result = {
        "benchmark": "soak",
        "minutes": args.minutes,
        "rate": args.rate,
        "hold_s": hold,
        "hold_kind": args.hold_kind,
        "hold_from_s": round(hold_start, 1),
        "result_ttl": args.result_ttl,
        "concurrency": args.concurrency,
        "enqueued": len(committed),
        "started": len(starts),
        "duplicates": len(records) - len(starts),
        "drained": drained,
        "drained_at_s": round(t_drained, 1),
        "p50_ms": c.rounded(c.percentile(all_latencies, 0.5)),
        "p99_ms": c.rounded(c.percentile(all_latencies, 0.99)),
        "autovacuum": info.get("pg_autovacuum"),
        "backlog_threshold": threshold,
        "steady_before_hold": steady_before,
        "recovered": recovered,
        "recovered_s_after_hold": round(recovered_at - hold_end, 1) if recovered_at else None,
        "bounded": bounded,
        "size_growth_after_hold": round(growth, 3) if growth is not None else None,
        "dead_tuples_end": last.get("n_dead_tup"),
        "jobs_mb_max": round(max((s["jobs_bytes"] for s in samples), default=0) / 2**20, 1),
        "jobs_mb_end": round(last.get("jobs_bytes", 0) / 2**20, 1),
        "producer_call_p99_ms": c.rounded(1000 * (c.percentile(producer_calls, 0.99) or 0)),
        "per_minute": rows,
        "samples": samples,
        "machine": info,
    }
    if not args.quiet:
        c.table(
            f"soak: {args.rate:,.0f} jobs/s for {args.minutes:g} min, transaction held "
            f"{hold_start:.0f}-{hold_end:.0f} s, result_ttl {args.result_ttl} s",
            ["min", "held", "enqueued", "p50 ms", "p99 ms", "max ms", "backlog max",
             "backlog end", "jobs MB", "claim idx MB", "dead tup max", "live tup",
             "autovac", "worker CPU %", "started", "claim pages"],
            [[r["minute"], "yes" if r["held"] else "", r["enqueued"], r["p50_ms"], r["p99_ms"],
              r["max_ms"], r["backlog_max"], r["backlog_end"], r["jobs_mb"],
              r["claim_index_mb"], r["n_dead_tup_max"], r["n_live_tup_end"], r["autovacuums"],
              r["worker_cpu_pct"], r["jobs_started"], r["claim_scan_pages_max"]] for r in rows],
        )
        if info.get("pg_autovacuum") != "on":
            c.log("WARNING: autovacuum is off on this server: dead tuples are never removed "
                  "and the numbers below say nothing about a normal installation")
        c.log(f"steady before the hold: {steady_before}; "
              f"recovered: {recovered} ({result['recovered_s_after_hold']} s after the "
              f"transaction ended); bounded: {bounded} (growth after the hold "
              f"{result['size_growth_after_hold']}, dead tuples at end "
              f"{result['dead_tuples_end']})")
    c.emit(result)


if __name__ == "__main__":
    main()
