"""Real workloads: CPU-bound tasks over processes, async I/O at high concurrency, a mix.

Three drains of jobs that do something, each timed like ``throughput.py`` (from the
commit of the enqueue until every job started and no row is queued or running, the
completer's writes included), with the workers registered before the enqueue:

* ``cpu``: ``--cpu-jobs`` sync tasks of about ``--cpu-ms`` of pure-Python arithmetic
  each (``spin(n)``, n calibrated once in this process; its cost on a free core, the
  fastest of 15 runs, measured again in each repetition and used for the ideal), one
  ``pgq worker --concurrency C`` against ``pgq worker --processes 2 --concurrency C``.
  Sync tasks run in threads that share one GIL: one process uses one core however many
  slots it has. Ideal: jobs x work / processes.
* ``io``: ``asyncio.sleep(--io-ms)`` async tasks in one process at ``--io-concurrency``
  (8, 64, 256), ``--io-jobs-per-slot`` jobs per slot. Ideal: jobs x sleep / slots.
* ``mixed``: both kinds in one drain on two queues, ``--queues io:64,cpu:2`` (64 slots
  for the I/O queue, 2 for the CPU one, claimed I/O first), with ``--processes 2``.
  Ideal: the longer of the CPU jobs' work over the processes and the I/O jobs' sleep
  over their slots.

For each: drain jobs/s, the ideal time, ``efficiency`` (ideal / measured) and
``overhead_ms_per_job``: (measured - ideal) / jobs, the wall-clock time the queue added
per job. Runs are interleaved per repetition; medians are reported.

    python benchmarks/workloads.py --cpu-jobs 2000 --reps 3
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import _common as c


def calibrate(bench: c.Bench, ms: float) -> int:
    """Rounds of ``spin`` that take ``ms`` on a free core here (the fastest of a few
    probes: on a busy machine the median measures the other processes too)."""
    assert bench.module is not None
    probe = 20_000
    fastest = min(_timed(bench.module.spin, probe) for _ in range(7))
    return max(1, round(probe * ms / 1000 / fastest))


def work_ms(bench: c.Bench, rounds: int) -> float:
    """What ``spin(rounds)`` costs on a free core: the fastest of 15 runs, in ms."""
    assert bench.module is not None
    return min(_timed(bench.module.spin, rounds) for _ in range(15)) * 1000


def _timed(function: Any, n: int) -> float:
    started = time.perf_counter()
    function(n)
    return time.perf_counter() - started


def drain(bench: c.Bench, batches: Sequence[tuple[str, str | None, list[tuple[Any, ...]]]], *,
          processes: int, concurrency: int, queues: str = c.QUEUE_NAME,
          worker_args: Sequence[str] = (), timeout: float = 600.0) -> dict[str, Any]:
    """Enqueue ``batches`` (task, queue or None for the task's, argument tuples whose first
    item is the job index) into one registered ``pgq worker`` (a supervisor with
    ``processes`` children when more than one); time the drain."""
    assert bench.module is not None
    bench.module.q.close()
    c.reset_schema(bench.dsn)
    bench.clear_records()
    c.checkpoint(bench.dsn)
    bench.module.q.workers()  # opens the enqueue pool outside the timing
    extra = ["--queues", queues, *worker_args]  # the last --queues given wins
    if processes > 1:
        extra += ["--processes", str(processes)]
    total = sum(len(items) for _, _, items in batches)
    with c.Workers(bench, count=1, concurrency=concurrency, extra=extra), \
            c.connect(bench.dsn) as conn:
        deadline = time.monotonic() + 60
        while conn.execute("SELECT count(*) FROM pgqueue.workers").fetchone() != (processes,):
            if time.monotonic() > deadline:
                raise SystemExit(f"{processes} worker processes did not register")
            time.sleep(0.02)
        for task, queue, items in batches:
            target = getattr(bench.module, task)
            (target.using(queue=queue) if queue else target).enqueue_many(items)
        t1 = time.perf_counter()
        complete = bench.wait_for(total, timeout)
        while complete and c.unfinished(conn):
            time.sleep(0.005)
        t_done = time.perf_counter()
    duplicates, missing = c.check_once(bench.read(), total)
    # Jobs started per worker process (one record file each): with --processes, every
    # child must have taken its share.
    shares = sorted(path.stat().st_size // c.RECORD_LEN for path in bench.records.glob("rec-*.dat"))
    return {
        "jobs_per_process": shares,
        "jobs": total,
        "drain_s": round(t_done - t1, 4) if complete else None,
        "duplicates": duplicates,
        "missing": missing,
        "complete": complete,
    }


def summary(runs: list[dict[str, Any]], ideal_s: float) -> dict[str, Any]:
    """Medians of a configuration's runs, against the ideal drain time."""
    jobs = runs[0]["jobs"]
    drain_s = c.median([r["drain_s"] for r in runs])
    return {
        "jobs": jobs,
        "drain_s": c.rounded(drain_s, 3),
        "drain_per_s": round(jobs / drain_s, 1) if drain_s else None,
        "ideal_s": round(ideal_s, 3),
        "efficiency": round(ideal_s / drain_s, 3) if drain_s else None,
        "overhead_ms_per_job": round((drain_s - ideal_s) / jobs * 1000, 4) if drain_s else None,
        "runs_s": [r["drain_s"] for r in runs],
        "jobs_per_process": [r["jobs_per_process"] for r in runs],
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "complete": all(r["complete"] for r in runs),
    }


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--cpu-jobs", type=c.human_int, default=2000)
    p.add_argument("--cpu-ms", type=float, default=5.0)
    p.add_argument("--cpu-concurrency", type=int, default=2,
                   help="slots per process for the CPU-bound drain (default 2)")
    p.add_argument("--cpu-processes", type=c.int_list, default=[1, 2])
    p.add_argument("--io-ms", type=float, default=10.0)
    p.add_argument("--io-concurrency", type=c.int_list, default=[8, 64, 256])
    p.add_argument("--io-jobs-per-slot", type=int, default=40)
    p.add_argument("--mixed-cpu-jobs", type=c.human_int, default=1000)
    p.add_argument("--mixed-io-jobs", type=c.human_int, default=10_000)
    p.add_argument("--mixed-processes", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--worker-args", default="",
                   help="extra pgq worker options for every drain, e.g. '--prefetch 0'")
    args = p.parse_args()
    worker_args = args.worker_args.split()

    cpu_runs: dict[int, list[dict[str, Any]]] = {k: [] for k in args.cpu_processes}
    io_runs: dict[int, list[dict[str, Any]]] = {k: [] for k in args.io_concurrency}
    mixed_runs: list[dict[str, Any]] = []
    costs: list[float] = []
    io_slots = 64
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        # The same jobs in every repetition; their cost measured again in each.
        rounds = calibrate(bench, args.cpu_ms)
        for rep in range(1, args.reps + 1):
            measured = work_ms(bench, rounds)
            costs.append(measured)
            c.log(f"rep {rep}: spin({rounds}) takes {measured:.2f} ms on a free core")
            order = args.cpu_processes if rep % 2 else list(reversed(args.cpu_processes))
            for k in order:
                run = drain(bench, [("cpu", None, [(i, rounds) for i in range(args.cpu_jobs)])],
                            processes=k, concurrency=args.cpu_concurrency,
                            worker_args=worker_args)
                cpu_runs[k].append(run)
                c.log(f"rep {rep}: cpu, {k} process(es): {run['drain_s']} s")
            seconds = args.io_ms / 1000
            for slots in args.io_concurrency:
                jobs = slots * args.io_jobs_per_slot
                run = drain(bench, [("io", None, [(i, seconds) for i in range(jobs)])],
                            processes=1, concurrency=slots, worker_args=worker_args)
                io_runs[slots].append(run)
                c.log(f"rep {rep}: io, concurrency {slots}: {run['drain_s']} s")
            n_cpu, n_io = args.mixed_cpu_jobs, args.mixed_io_jobs
            run = drain(bench, [
                ("io", "io", [(i, seconds) for i in range(n_io)]),
                ("cpu", "cpu", [(n_io + i, rounds) for i in range(n_cpu)]),
            ], processes=args.mixed_processes, concurrency=io_slots + 2,
                queues=f"io:{io_slots},cpu:2", worker_args=worker_args)
            mixed_runs.append(run)
            c.log(f"rep {rep}: mixed: {run['drain_s']} s")

    work = c.median(costs) or args.cpu_ms
    cpu = {k: summary(runs, args.cpu_jobs * work / 1000 / k) for k, runs in cpu_runs.items()}
    io = {slots: summary(runs, slots * args.io_jobs_per_slot * args.io_ms / 1000 / slots)
          for slots, runs in io_runs.items()}
    mixed = summary(mixed_runs, max(
        args.mixed_cpu_jobs * work / 1000 / args.mixed_processes,
        args.mixed_io_jobs * args.io_ms / 1000 / (io_slots * args.mixed_processes)))
    first, last = args.cpu_processes[0], args.cpu_processes[-1]
    speedup = (cpu[last]["drain_per_s"] / cpu[first]["drain_per_s"]
               if cpu[last]["drain_per_s"] and cpu[first]["drain_per_s"] else None)
    result = {
        "benchmark": "workloads",
        "reps": args.reps,
        "worker_args": worker_args,
        "cpu_work_ms": round(work, 3),
        "cpu": {str(k): v for k, v in cpu.items()},
        "cpu_speedup": round(speedup, 3) if speedup else None,
        "io_ms": args.io_ms,
        "io": {str(k): v for k, v in io.items()},
        "mixed": mixed,
        "duplicates": sum(s["duplicates"] for s in [*cpu.values(), *io.values(), mixed]),
        "missing": sum(s["missing"] for s in [*cpu.values(), *io.values(), mixed]),
        "machine": info,
    }
    if not args.quiet:
        rows = [[f"cpu {work:.1f} ms, {k} process(es) x {args.cpu_concurrency}", *_cells(s)]
                for k, s in cpu.items()]
        rows += [[f"io {args.io_ms:g} ms, concurrency {k}", *_cells(s)] for k, s in io.items()]
        rows.append([f"mixed io:{io_slots},cpu:2 x {args.mixed_processes} processes",
                     *_cells(mixed)])
        c.table(f"workloads (medians of {args.reps}; cpu speed-up {first} → {last} processes: "
                f"{c.fmt(result['cpu_speedup'])})",
                ["workload", "jobs", "drain s", "jobs/s", "ideal s", "efficiency",
                 "overhead ms/job", "dup", "missing"], rows)
    c.emit(result)


def _cells(s: dict[str, Any]) -> list[Any]:
    return [s["jobs"], s["drain_s"], s["drain_per_s"], s["ideal_s"], s["efficiency"],
            s["overhead_ms_per_job"], s["duplicates"], s["missing"]]


if __name__ == "__main__":
    main()
