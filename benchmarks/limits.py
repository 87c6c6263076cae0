"""What limits cost, and that they leak no slot: claim overhead per limit kind, and a soak
of workers killed with SIGKILL under a global concurrency limit.

**Overhead** (always run). The same ``--jobs`` no-op jobs, each with a concurrency key
(``--keys`` of them, round-robin), in queue ``bench`` under each variant in turn; the
limits are set high enough never to bind, so what is measured is their bookkeeping:

* ``none``            — no limit (the jobs' keys are ignored: the plain claim);
* ``concurrency``     — ``set_queue(concurrency=1_000_000)``;
* ``key_concurrency`` — ``set_queue(key_concurrency=1_000_000)``;
* ``rate``            — ``set_queue(rate_limit="1000000/s")``;
* ``fair``            — ``set_queue(fair=True)``.

For each: the drain rate of one ``pgq worker --concurrency 8`` (``drain_per_s``, from the
enqueue's commit until no job is left unfinished; ``ms_per_job`` is its inverse), and the
time of one claim (``claim_p50_ms``/``claim_p90_ms``): the worker's own statements, a
``LIMIT 8`` claim over ``--ready`` ready jobs on a connection of its own, each claim
rolled back so that every one meets the same table, variants interleaved round by round.
A limited claim is the worker's two statements in one transaction (``lock_limits``, then
``claim_limited_jobs_any_queue``); an unlimited one is ``claim_jobs_any_queue``.

**Soak** (``--soak MINUTES``). ``--workers`` worker processes (``--lease 3s``) take a
stream of ``--rate`` jobs/s (each sleeps 20 to 100 ms) from queue ``bench`` limited to
``--limit`` running jobs, while one random worker is killed with SIGKILL and restarted
every ``--kill-every`` seconds (on average). A sampler reads the running rows every 50 ms.
At the end the stream stops and the jobs drain; then ``3 x --limit`` jobs of 0.5 s show
whether every slot came back. Verdicts: ``never_above_limit``, ``drained`` (nothing left
queued or running), ``slots_back`` (the limit was reached again after the soak), and
``no_slot_leak`` (all three).

    python benchmarks/limits.py --jobs 5000 --ready 20000 --claims 300
    python benchmarks/limits.py --jobs 2000 --soak 10
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import textwrap
import threading
import time
from typing import Any

import _common as c
import psycopg

from pgqueue.db.queries import for_schema
from pgqueue.worker.connections import CLAIMS
from pgqueue.worker.producer import LIMITED_SCAN, MAX_KEYS

QUERIES = for_schema(c.SCHEMA)
VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "concurrency": {"concurrency": 1_000_000},
    "key_concurrency": {"key_concurrency": 1_000_000},
    "rate": {"rate_limit": "1000000/s"},
    "fair": {"fair": True},
}
# Every setting a variant may leave behind, cleared before the next one.
CLEARED: dict[str, Any] = {"concurrency": None, "key_concurrency": None, "rate_limit": None,
                           "fair": False}
CLAIM_LIMIT = 8

# Appended to the shared task module: a task that holds its slot a while.
HOLD_TASK = '''

import asyncio


@q.task(name="bench.hold", queue={queue!r}, result_ttl={result_ttl})
async def hold(i: int, seconds: float) -> None:
    """Records its start, then holds its slot for ``seconds``."""
    _record(i)
    await asyncio.sleep(seconds)
'''


class LimitsBench(c.Bench):
    """The shared benchmark task module plus ``bench.hold``."""

    def setup(self) -> Any:
        self.records.mkdir(parents=True, exist_ok=True)
        self.module_dir.mkdir(parents=True, exist_ok=True)
        fields = {"dsn": self.dsn, "recdir": str(self.records), "queue": c.QUEUE_NAME,
                  "result_ttl": self.result_ttl}
        source = c.TASK_MODULE.format(**fields) + HOLD_TASK.format(**fields)
        (self.module_dir / "bench_tasks.py").write_text(textwrap.dedent(source))
        sys.path.insert(0, str(self.module_dir))
        sys.modules.pop("bench_tasks", None)
        import bench_tasks  # type: ignore[import-not-found]

        self.module = bench_tasks
        return bench_tasks


def fresh(bench: LimitsBench, settings: dict[str, Any]) -> None:
    """A new schema (no bloat, no limit state) with queue ``bench`` set up as given."""
    assert bench.module is not None
    bench.module.q.close()  # its pooled connections would outlive the schema
    c.reset_schema(bench.dsn)
    bench.clear_records()
    if settings:
        bench.module.q.set_queue(c.QUEUE_NAME, **settings)
    c.checkpoint(bench.dsn)


# -- overhead: drains -----------------------------------------------------------------------


def drain(bench: LimitsBench, variant: str, *, jobs: int, keys: int) -> dict[str, Any]:
    """``jobs`` keyed no-op jobs into one idle worker under ``variant``; time the drain (as
    ``_common.drain``, which cannot give the jobs keys)."""
    assert bench.module is not None
    fresh(bench, VARIANTS[variant])
    per_key: list[list[tuple[int]]] = [[] for _ in range(keys)]
    for i in range(jobs):
        per_key[i % keys].append((i,))
    with c.Workers(bench, count=1, concurrency=8), c.connect(bench.dsn) as conn, \
            psycopg.connect(bench.dsn) as tx:
        # One transaction: every job becomes visible at one instant, its commit.
        t0 = time.perf_counter()
        for k, items in enumerate(per_key):
            bench.module.noop.using(concurrency_key=f"k{k}", conn=tx).enqueue_many(items)
        tx.commit()
        t1 = time.perf_counter()
        complete = bench.wait_for(jobs, 600)
        left = -1
        while complete:
            left = c.unfinished(conn)
            if left == 0:
                break
            time.sleep(0.005)
        t_done = time.perf_counter()
    duplicates, missing = c.check_once(bench.read(), jobs)
    seconds = t_done - t1
    return {
        "enqueue_s": round(t1 - t0, 3),
        "drain_s": round(seconds, 3) if complete else None,
        "drain_per_s": round(jobs / seconds, 1) if complete else None,
        "ms_per_job": round(seconds * 1000 / jobs, 4) if complete else None,
        "duplicates": duplicates,
        "missing": missing,
        "complete": complete and left == 0,
    }


# -- overhead: one claim ----------------------------------------------------------------------


def _claim_params() -> dict[str, Any]:
    return {"worker_id": "bench-claimer", "lease": 30.0, "token": 1, "limit": CLAIM_LIMIT,
            "start": CLAIM_LIMIT}


def _one_claim(conn: psycopg.Connection[Any], variant: str) -> int:
    """The worker's claim under ``variant``, rolled back; how many jobs it took."""
    params = _claim_params()
    if variant == "none":
        rows = conn.execute(QUERIES.claim_jobs_any_queue.sql, params, prepare=True).fetchall()
    else:
        # As the producer's _claim_limited: take the limits' rows, then claim what they
        # admit, in one transaction.
        held = conn.execute(QUERIES.lock_limits.sql, prepare=True).fetchone()
        assert held is not None
        queues, tasks, skipped_queues, skipped_tasks = held
        rows = conn.execute(QUERIES.claim_limited_jobs_any_queue.sql, params | {
            "locked_queues": queues, "locked_tasks": tasks,
            "skipped_queues": skipped_queues, "skipped_tasks": skipped_tasks,
            "max_keys": MAX_KEYS, "scan": CLAIM_LIMIT + LIMITED_SCAN,
        }, prepare=True).fetchall()
    conn.rollback()
    return len(rows)


def measure_claims(bench: LimitsBench, *, ready: int, keys: int, claims: int
                   ) -> dict[str, Any]:
    """``claims`` claims per variant, interleaved, over ``ready`` keyed ready jobs."""
    assert bench.module is not None
    fresh(bench, {})
    with c.connect(bench.dsn) as setup:
        setup.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args, concurrency_key, run_at, created_at) "
            "SELECT %s, 'bench.noop', jsonb_build_array(g), 'k' || (g %% %s), "
            "now() - interval '1 minute', now() - interval '1 minute' "
            "FROM generate_series(1, %s) g", (c.QUEUE_NAME, keys, ready))
        setup.execute("VACUUM ANALYZE pgqueue.jobs")
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    # Not autocommit: each claim is rolled back. The claim connection's settings.
    with c.session_connection(bench.dsn, CLAIMS) as conn:
        for _ in range(claims):
            for variant, settings in VARIANTS.items():
                bench.module.q.set_queue(c.QUEUE_NAME, **(CLEARED | settings))
                t0 = time.perf_counter()
                taken = _one_claim(conn, variant)
                times[variant].append((time.perf_counter() - t0) * 1000)
                assert taken == CLAIM_LIMIT, (variant, taken)
    # The first claim of each prepares its statements: left out.
    return {variant: {"claim_p50_ms": c.rounded(c.percentile(values[1:], 0.5), 3),
                      "claim_p90_ms": c.rounded(c.percentile(values[1:], 0.9), 3)}
            for variant, values in times.items()}


# -- soak ---------------------------------------------------------------------------------


class Cluster(c.Workers):
    """``pgq worker`` processes (each in its own process group), killed and restarted."""

    def __init__(self, bench: LimitsBench, *, count: int, concurrency: int, lease: float
                 ) -> None:
        super().__init__(bench, count=count, concurrency=concurrency,
                         extra=["--lease", f"{lease:g}s", "--poll-interval", "1s"])
        self.started = 0

    def kill_one(self) -> None:
        """SIGKILL a random worker's process group; start a new worker in its place."""
        index = random.randrange(len(self.processes))
        victim = self.processes[index]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        self.started += 1
        self.processes[index] = self.spawn(f"soak-worker-{self.started}")


class RunningSampler(threading.Thread):
    """The running rows of queue ``bench`` every 50 ms: the highest count, and whether
    ``limit`` was reached since :meth:`mark`."""

    def __init__(self, dsn: str, limit: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.limit = limit
        self.highest = 0
        self.samples = 0
        self.reached_since_mark = False
        self._stop_event = threading.Event()

    def mark(self) -> None:
        self.reached_since_mark = False

    def run(self) -> None:
        with c.connect(self.dsn) as conn:
            while not self._stop_event.wait(0.05):
                row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE status = "
                                   "'running' AND queue = %s", (c.QUEUE_NAME,)).fetchone()
                running = int(row[0]) if row else 0
                self.samples += 1
                self.highest = max(self.highest, running)
                self.reached_since_mark |= running >= self.limit

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


def soak(bench: LimitsBench, *, minutes: float, rate: float, limit: int, workers: int,
         concurrency: int, kill_every: float, lease: float) -> dict[str, Any]:
    assert bench.module is not None
    fresh(bench, {"concurrency": limit})
    hold = bench.module.hold
    bench.module.q.workers()  # the enqueue pool, opened before the clock starts
    sampler = RunningSampler(bench.dsn, limit)
    cluster = Cluster(bench, count=workers, concurrency=concurrency, lease=lease)
    cluster.start()
    sampler.start()
    enqueued = kills = 0
    try:
        t0 = time.monotonic()
        end = t0 + minutes * 60
        next_kill = t0 + random.expovariate(1 / kill_every)
        while (now := time.monotonic()) < end:
            due = int((now - t0) * rate) - enqueued
            if due > 0:
                hold.enqueue_many([(enqueued + k, random.uniform(0.02, 0.1))
                                   for k in range(due)])
                enqueued += due
            if now >= next_kill:
                cluster.kill_one()
                kills += 1
                next_kill = now + random.expovariate(1 / kill_every)
            time.sleep(0.05)
        c.log(f"soak: {enqueued} jobs enqueued, {kills} workers killed; draining")
        # Leases of the last killed worker expire, are rescued, and the jobs run again.
        with c.connect(bench.dsn) as conn:
            deadline = time.monotonic() + lease + 120
            while (left := c.unfinished(conn)) and time.monotonic() < deadline:
                time.sleep(0.1)
            drained = left == 0
            running_after = int(conn.execute(
                "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running'").fetchone()[0])
            succeeded = int(conn.execute(
                "SELECT count(*) FROM pgqueue.jobs WHERE status = 'succeeded'").fetchone()[0])
            dead = int(conn.execute("SELECT count(*) FROM pgqueue.dead_jobs").fetchone()[0])
        # Every slot came back: jobs long enough to fill them all at once.
        sampler.mark()
        hold.enqueue_many([(enqueued + k, 0.5) for k in range(3 * limit)])
        with c.connect(bench.dsn) as conn:
            deadline = time.monotonic() + 60
            while c.unfinished(conn) and time.monotonic() < deadline:
                time.sleep(0.05)
        slots_back = sampler.reached_since_mark
    finally:
        sampler.stop()
        cluster.stop()
    executions = len(bench.read())
    never_above = sampler.highest <= limit
    return {
        "minutes": minutes, "rate": rate, "limit": limit, "workers": workers,
        "concurrency": concurrency, "lease_s": lease, "kills": kills,
        "enqueued": enqueued, "succeeded": succeeded, "dead": dead,
        # Killed mid-job, a job runs again after its lease is rescued: the executions
        # beyond one per job are about the jobs the killed workers held.
        "reexecuted": executions - enqueued - 3 * limit,
        "max_running": sampler.highest, "samples": sampler.samples,
        "never_above_limit": never_above, "drained": drained,
        "running_after": running_after, "slots_back": slots_back,
        "no_slot_leak": never_above and drained and running_after == 0 and slots_back,
    }


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=5000, help="jobs per drain")
    p.add_argument("--keys", type=int, default=50, help="concurrency keys of the jobs")
    p.add_argument("--ready", type=c.human_int, default=20000,
                   help="ready jobs under the timed claims")
    p.add_argument("--claims", type=int, default=300, help="timed claims per variant")
    p.add_argument("--soak", type=float, default=0.0, metavar="MINUTES",
                   help="also soak for this long under random SIGKILLs (default: no soak)")
    p.add_argument("--rate", type=float, default=40.0, help="soak: jobs enqueued per second")
    p.add_argument("--limit", type=int, default=6, help="soak: the queue's concurrency")
    p.add_argument("--workers", type=int, default=3, help="soak: worker processes")
    p.add_argument("--concurrency", type=int, default=4, help="soak: slots per worker")
    p.add_argument("--kill-every", type=float, default=10.0,
                   help="soak: mean seconds between two kills")
    p.add_argument("--lease", type=float, default=3.0, help="soak: the workers' --lease")
    args = p.parse_args()

    with c.bench_session(args.dsn, drop=args.drop, kind=LimitsBench) as bench:
        info = c.machine(args.dsn)
        drains = {}
        for variant in VARIANTS:
            drains[variant] = drain(bench, variant, jobs=args.jobs, keys=args.keys)
            c.log(f"{variant}: {drains[variant]}")
        claims = measure_claims(bench, ready=args.ready, keys=args.keys, claims=args.claims)
        soaked = None
        if args.soak > 0:
            soaked = soak(bench, minutes=args.soak, rate=args.rate, limit=args.limit,
                          workers=args.workers, concurrency=args.concurrency,
                          kill_every=args.kill_every, lease=args.lease)
    overhead = {variant: drains[variant] | claims[variant] for variant in VARIANTS}
    result: dict[str, Any] = {
        "benchmark": "limits",
        "jobs": args.jobs, "keys": args.keys, "ready": args.ready, "claims": args.claims,
        "overhead": overhead,
        "duplicates": sum(d["duplicates"] for d in drains.values()),
        "missing": sum(d["missing"] for d in drains.values()),
        "complete": all(d["complete"] for d in drains.values()),
        "soak": soaked,
        "machine": info,
    }
    if not args.quiet:
        c.table(f"limits: {args.jobs:,} keyed no-op jobs per drain (1 worker x 8); "
                f"claims (LIMIT {CLAIM_LIMIT}, rolled back) over {args.ready:,} ready jobs, "
                f"{args.claims} per variant, interleaved",
                ["variant", "drain_per_s", "ms_per_job", "claim_p50_ms", "claim_p90_ms"],
                [[v, o["drain_per_s"], o["ms_per_job"], o["claim_p50_ms"], o["claim_p90_ms"]]
                 for v, o in overhead.items()])
        if soaked is not None:
            c.table("soak under SIGKILL", list(soaked), [list(soaked.values())])
    c.emit(result)


if __name__ == "__main__":
    main()
